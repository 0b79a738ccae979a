import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it, vi } from "vitest";
import { ModelConfig } from "../../shared/config/policy.ts";
import { initBackend } from "../../shared/model/index.ts";
import { initialValues, TransformerPolicy } from "../../shared/model/transformer.ts";

const MODEL = ModelConfig.parse({
  vocabSize: 300,
  dModel: 24,
  layers: 2,
  heads: 4,
  kvHeads: 2,
  ffnHidden: 40,
  contextLength: 64,
  qkvBias: true,
});
const OPTIMIZER = { learningRate: 1e-2, adamBeta1: 0.9, adamBeta2: 0.99, adamEps: 1e-8, gradClip: 0.5 };

function sequence(length: number, seed: number): Int32Array {
  return Int32Array.from({ length }, (_, i) => (seed * 37 + i * 11) % MODEL.vocabSize);
}
const SEQUENCES = [sequence(21, 1), sequence(17, 2), sequence(9, 3), sequence(25, 4)];
const TOKENS = SEQUENCES.reduce((n, s) => n + s.length, 0);
/** Additive over rows, so one pass over the batch has the same gradient as the sum over micro-batches. */
const loss = (logp: tf.Tensor2D) => tf.div(tf.neg(tf.sum(logp)), TOKENS) as tf.Scalar;

/** The update rule written out in float64 on the host: global-norm clip, bias-corrected Adam. */
class HostAdam {
  private readonly m = new Map<string, Float64Array>();
  private readonly v = new Map<string, Float64Array>();
  private t = 0;

  step(weights: Map<string, Float32Array>, grads: Map<string, Float32Array>): number {
    const { learningRate: lr, adamBeta1: b1, adamBeta2: b2, adamEps: eps, gradClip } = OPTIMIZER;
    let sq = 0;
    for (const g of grads.values()) for (const x of g) sq += x * x;
    const norm = Math.sqrt(sq);
    const clip = norm > gradClip ? gradClip / norm : 1;
    this.t += 1;
    for (const [name, w] of weights) {
      const g = grads.get(name)!;
      const m = this.m.get(name) ?? new Float64Array(w.length);
      const v = this.v.get(name) ?? new Float64Array(w.length);
      for (let i = 0; i < w.length; i++) {
        const gi = g[i]! * clip;
        m[i] = b1 * m[i]! + (1 - b1) * gi;
        v[i] = b2 * v[i]! + (1 - b2) * gi * gi;
        w[i] = w[i]! - (lr * (m[i]! / (1 - b1 ** this.t))) / (Math.sqrt(v[i]! / (1 - b2 ** this.t)) + eps);
      }
      this.m.set(name, m);
      this.v.set(name, v);
    }
    return norm;
  }

  moments(which: "m" | "v"): Map<string, Float64Array> {
    return which === "m" ? this.m : this.v;
  }
}

function maxDifference(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

beforeAll(async () => {
  await initBackend("wasm");
});

describe("Adam and gradient accumulation on the device", () => {
  it("equal the host computation within float32 tolerance, reading back no weight, moment or gradient", () => {
    const initial = initialValues(MODEL, 9);
    // Device: micro-batches of ≤ 30 tokens, so the 72 tokens take 3 accumulated passes.
    const device = new TransformerPolicy(MODEL, initial, 0, {
      trainable: true,
      optimizer: { ...OPTIMIZER, microBatchTokens: 30 },
    });
    // Host reference: one pass over the whole batch for the gradient, Adam in float64 above.
    const weights = new Map([...initial].map(([n, w]) => [n, Float32Array.from(w)]));
    const host = new HostAdam();
    // The RMSNorm custom op reads its d-sized weight on the host in the forward pass (an ops.ts
    // matter, not the optimizer's); every other parameter-sized read would be the update's.
    const parameterSizes = new Set(
      [...device.params].filter(([name]) => !name.endsWith("norm")).map(([, p]) => p.size),
    );
    const reads: number[] = [];
    const dataSync = tf.Tensor.prototype.dataSync;
    try {
      for (let step = 0; step < 3; step++) {
        const reference = new TransformerPolicy(MODEL, weights, 0, {
          trainable: true,
          optimizer: { ...OPTIMIZER, microBatchTokens: 10_000 },
        });
        const { grads } = reference.gradients(SEQUENCES, 1, loss);
        reference.dispose();
        const hostNorm = host.step(weights, grads);
        reads.length = 0;
        vi.spyOn(tf.Tensor.prototype, "dataSync").mockImplementation(function (this: tf.Tensor) {
          reads.push(this.size);
          return dataSync.call(this);
        } as typeof dataSync);
        const { gradNorm } = device.trainStep(SEQUENCES, 1, loss);
        vi.restoreAllMocks();
        expect(Math.abs(gradNorm - hostNorm) / hostNorm).toBeLessThan(1e-4);
        expect(hostNorm).toBeGreaterThan(OPTIMIZER.gradClip); // the clip is exercised
        // Only activations/logits (per micro-batch) and scalars came back: nothing parameter-sized.
        expect(reads.filter((size) => parameterSizes.has(size))).toEqual([]);
        expect(reads.slice(-2)).toEqual([1, 1]); // the summed loss, then the gradient norm
      }
    } finally {
      vi.restoreAllMocks();
    }
    const trained = device.values();
    let moved = 0;
    for (const [name, w] of weights) {
      expect(maxDifference(trained.get(name)!, w), name).toBeLessThan(2e-5);
      moved = Math.max(moved, maxDifference(w, initial.get(name)!));
    }
    expect(moved).toBeGreaterThan(1e-2); // three steps of lr 1e-2 moved the weights: not vacuous
    const state = device.optimizerState()!;
    expect(state.t).toBe(3);
    for (const which of ["m", "v"] as const)
      for (const [name, moment] of host.moments(which)) {
        const scale = Math.max(...moment.map(Math.abs));
        expect(maxDifference(state[which].get(name)!, moment) / scale, `${which}.${name}`).toBeLessThan(1e-4);
      }
    device.dispose();
  });
});
