import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { initBackend } from "../../shared/model/index.ts";
import { attention, type Dims, RotaryTable } from "../../shared/model/ops.ts";
import { seededRandom } from "../../shared/rl/random.ts";

beforeAll(async () => {
  await initBackend("wasm");
});

const THETA = 10_000;
const dims: Dims = {
  dModel: 32,
  heads: 4,
  kvHeads: 2,
  headDim: 8,
  qkvWidth: 8 * 8,
  ffnHidden: 8,
  vocabSize: 8,
  normEps: 1e-5,
};
// Lengths that are and are not multiples of the test's block size (4), one single token, in one packed batch.
const seqLens = [5, 13, 1, 8, 16];
const rows = seqLens.reduce((a, b) => a + b, 0);

/** Causal GQA with rotary positions written out directly, in float64: the definition the op must meet. */
function reference(qkv: Float64Array): Float64Array {
  const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
  const half = hd / 2;
  const roped = Float64Array.from(qkv);
  let offset = 0;
  for (const L of seqLens) {
    for (let t = 0; t < L; t++)
      for (let h = 0; h < heads + kvHeads; h++)
        for (let i = 0; i < half; i++) {
          const angle = t * THETA ** ((-2 * i) / hd);
          const o = (offset + t) * C + h * hd;
          const [a, b] = [roped[o + i]!, roped[o + i + half]!];
          roped[o + i] = a * Math.cos(angle) - b * Math.sin(angle);
          roped[o + i + half] = b * Math.cos(angle) + a * Math.sin(angle);
        }
    offset += L;
  }
  const out = new Float64Array(rows * heads * hd);
  offset = 0;
  for (const L of seqLens) {
    for (let h = 0; h < heads; h++) {
      const kv = Math.floor(h / (heads / kvHeads));
      for (let t = 0; t < L; t++) {
        const q = (offset + t) * C + h * hd;
        const scores = Array.from({ length: t + 1 }, (_, s) => {
          const k = (offset + s) * C + (heads + kv) * hd;
          let dot = 0;
          for (let i = 0; i < hd; i++) dot += roped[q + i]! * roped[k + i]!;
          return dot / Math.sqrt(hd);
        });
        const max = Math.max(...scores);
        const weights = scores.map((s) => Math.exp(s - max));
        const sum = weights.reduce((a, b) => a + b, 0);
        for (let s = 0; s <= t; s++) {
          const v = (offset + s) * C + (heads + kvHeads + kv) * hd;
          for (let i = 0; i < hd; i++)
            out[(offset + t) * heads * hd + h * hd + i]! += (weights[s]! / sum) * roped[v + i]!;
        }
      }
    }
    offset += L;
  }
  return out;
}

describe("training attention", () => {
  const random = seededRandom(3);
  const qkv = Float32Array.from({ length: rows * dims.qkvWidth }, () => 2 * random() - 1);
  const upstream = Float32Array.from({ length: rows * dims.heads * dims.headDim }, () => 2 * random() - 1);
  const rope = new RotaryTable(64, dims.headDim, THETA);

  /** Output and d(Σ out ⊙ upstream)/d qkv of the op with query blocks of `block` positions. */
  function run(block: number): { out: Float32Array; grad: Float32Array } {
    const x = tf.tensor2d(qkv, [rows, dims.qkvWidth]);
    const w = tf.tensor2d(upstream, [rows, dims.heads * dims.headDim]);
    const out = tf.tidy(() => attention(x, seqLens, dims, rope, block));
    const grad = tf.grad((input: tf.Tensor) =>
      tf.sum(tf.mul(attention(input as tf.Tensor2D, seqLens, dims, rope, block), w)),
    )(x);
    const result = { out: Float32Array.from(out.dataSync()), grad: Float32Array.from(grad.dataSync()) };
    for (const t of [x, w, out, grad]) t.dispose();
    return result;
  }

  it("blocked and unblocked forms give the reference outputs, and the same gradients", () => {
    const expected = reference(Float64Array.from(qkv));
    const dense = run(1024);
    for (const block of [1, 3, 4, 1024]) {
      const { out, grad } = block === 1024 ? dense : run(block);
      for (let i = 0; i < expected.length; i++)
        expect(Math.abs(out[i]! - expected[i]!), `block ${block} out[${i}]`).toBeLessThan(1e-5);
      for (let i = 0; i < grad.length; i++)
        expect(Math.abs(grad[i]! - dense.grad[i]!), `block ${block} grad[${i}]`).toBeLessThan(1e-5);
    }
  });

  it("gradients match finite differences of the reference (blocked form)", () => {
    const { grad } = run(4);
    const objective = (x: Float64Array) => reference(x).reduce((sum, v, i) => sum + v * upstream[i]!, 0);
    const eps = 1e-4;
    // Every q|k|v column of a few rows: the first and last of a sequence, a single-token one, block edges.
    const checkRows = [0, 4, 5, 9, 17, 18, 19, 26, 27, 30, 42];
    for (const r of checkRows)
      for (let c = 0; c < dims.qkvWidth; c++) {
        const index = r * dims.qkvWidth + c;
        const x = Float64Array.from(qkv);
        x[index]! += eps;
        const up = objective(x);
        x[index]! -= 2 * eps;
        const numeric = (up - objective(x)) / (2 * eps);
        expect(Math.abs(grad[index]! - numeric), `qkv[${r}, ${c}]`).toBeLessThan(1e-4 + 1e-3 * Math.abs(numeric));
      }
  });
});
