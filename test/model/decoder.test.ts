import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { createPolicy, initBackend, KvDecoder, logProbOf, type TransformerPolicy } from "../../shared/model/index.ts";
import { KernelMemory } from "../../shared/model/kernel.ts";
import { SMALL, tokens } from "./support.ts";

beforeAll(async () => {
  await initBackend("wasm");
});

const TOLERANCE = 1e-4;

function argmax(logits: Float32Array): number {
  let best = 0;
  for (let j = 1; j < logits.length; j++) if (logits[j]! > logits[best]!) best = j;
  return best;
}

interface Generated {
  tokens: number[];
  logprobs: number[];
}

/** Greedy generation of `steps` tokens for every prompt, all slots stepped together. */
function generateBatched(decoder: KvDecoder, prompts: number[][], steps: number): Generated[] {
  const out = prompts.map(() => ({ tokens: [] as number[], logprobs: [] as number[] }));
  const take = (i: number, logits: Float32Array) => {
    const token = argmax(logits);
    out[i]!.tokens.push(token);
    out[i]!.logprobs.push(logProbOf(logits, token, 0.8));
  };
  const slots = prompts.map((prompt, i) => {
    const added = decoder.add(prompt);
    take(i, added.logits);
    return added.slot;
  });
  for (let s = 1; s < steps; s++) {
    const logits = decoder.step(
      slots,
      out.map((o) => o.tokens.at(-1)!),
    );
    logits.forEach((l, i) => {
      take(i, l);
    });
  }
  for (const slot of slots) decoder.remove(slot);
  return out;
}

function expectSame(a: Generated[], b: Generated[]): void {
  expect(a.map((g) => g.tokens)).toEqual(b.map((g) => g.tokens));
  a.forEach((g, i) => {
    g.logprobs.forEach((lp, t) => {
      expect(Math.abs(lp - b[i]!.logprobs[t]!)).toBeLessThan(TOLERANCE);
    });
  });
}

describe("attention row kernels", () => {
  it("wasm SIMD and plain JS agree (dot, weighted sum, exp) for odd and even row counts and head sizes", () => {
    const memories = [new KernelMemory(), new KernelMemory({ simd: false })];
    expect(memories.map((m) => m.simd)).toEqual([true, false]);
    for (const rows of [1, 2, 7, 40])
      for (const hd of [4, 8, 32]) {
        const stride = 2 * hd + 4; // keys of one head inside wider rows, as in the cache
        const [simd, js] = memories.map((m) => {
          const q = m.alloc(hd);
          const k = m.alloc(rows * stride);
          const scores = m.alloc(rows);
          const out = m.alloc(hd);
          const f = m.floats;
          for (let i = 0; i < hd; i++) f[(q >> 2) + i] = Math.sin(i + rows);
          for (let i = 0; i < rows * stride; i++) f[(k >> 2) + i] = Math.cos(i * 0.37);
          m.kernels.dotRows(q, k + 4, scores, rows, hd * 4, stride * 4);
          m.kernels.axpyRows(scores, k + 8, out, rows, hd * 4, stride * 4);
          const read = (p: number, n: number) => [...m.floats.subarray(p >> 2, (p >> 2) + n)];
          const before = [...read(scores, rows), ...read(out, hd)];
          // exp(x − 2) over the scores, whole lanes (padded with −∞ as the decoder does)
          const padded = (rows + 3) & ~3;
          m.floats.fill(Number.NEGATIVE_INFINITY, (scores >> 2) + rows, (scores >> 2) + padded);
          const sum = m.kernels.expSum(scores, padded * 4, 2);
          return [...before, sum, ...read(scores, rows)];
        });
        // Reference for one score: q · k_row1 (sum of sin·cos products).
        let dot = 0;
        for (let e = 0; e < hd; e++) dot += Math.sin(e + rows) * Math.cos((stride + 1 + e) * 0.37);
        // after [scores, out, sum] come exp(score − 2): check score 1 against its reference too
        if (rows > 1) {
          expect(Math.abs(js![1]! - dot)).toBeLessThan(1e-4);
          expect(js![rows + hd + 2]).toBeCloseTo(Math.exp(js![1]! - 2), 5);
        }
        simd!.forEach((v, i) => {
          expect(Math.abs(v - js![i]!)).toBeLessThan(1e-4 * Math.max(1, Math.abs(v)));
        });
      }
  });

  it("silu(g)·u: wasm SIMD and plain JS agree with Math.exp, including saturated inputs", () => {
    const memories = [new KernelMemory(), new KernelMemory({ simd: false })];
    const width = 96;
    // g spans −120..120 (past the ±87 clamp), u varies in sign and size.
    const g = Array.from({ length: width }, (_, i) => -120 + (240 * i) / (width - 1));
    const u = Array.from({ length: width }, (_, i) => Math.cos(i * 0.7) * 3);
    const [simd, js] = memories.map((m) => {
      const gp = m.alloc(width);
      const up = m.alloc(width);
      const out = m.alloc(width);
      m.floats.set(g, gp >> 2);
      m.floats.set(u, up >> 2);
      m.kernels.siluMul(gp, up, out, width * 4);
      return [...m.floats.subarray(out >> 2, (out >> 2) + width)];
    });
    g.forEach((x, i) => {
      const expected = (Math.fround(x) * Math.fround(u[i]!)) / (1 + Math.exp(-Math.fround(x)));
      const tolerance = 1e-6 * Math.max(1, Math.abs(expected));
      expect(Math.abs(simd![i]! - expected)).toBeLessThan(tolerance);
      expect(Math.abs(js![i]! - expected)).toBeLessThan(tolerance);
    });
    // Saturation: silu(−120) is 0, silu(120)·u is 120·u.
    expect(Math.abs(simd![0]!)).toBeLessThan(1e-30);
    expect(simd![width - 1]).toBeCloseTo(120 * Math.fround(u[width - 1]!), 3);
  });
});

describe("batched decoding", () => {
  it("gives the same tokens and log-probs as one-at-a-time decoding for slots of mixed lengths", () => {
    const policy = createPolicy(SMALL, 21);
    const prompts = [3, 17, 1, 9].map((n, i) => [...tokens(n, 30 + i)]);
    const batched = generateBatched(new KvDecoder(policy, 4), prompts, 12);
    const alone = prompts.map((p) => generateBatched(new KvDecoder(policy, 1), [p], 12)[0]!);
    // The plain-JS kernels (the fallback without wasm SIMD) agree with the SIMD ones.
    const simd = new KvDecoder(policy, 1);
    const plainJs = new KvDecoder(policy, 4, { noSimd: true });
    expect(simd.simd).toBe(true);
    expect(plainJs.simd).toBe(false);
    const fromJs = generateBatched(plainJs, prompts, 12);
    expectSame(batched, alone);
    expectSame(fromJs, alone);
    // Non-trivial generations: some token differs from its predecessor.
    expect(batched.some((g) => new Set(g.tokens).size > 1)).toBe(true);
    policy.dispose();
  });
});

describe("decode weights", () => {
  it("follow the policy's weights after a training step (no stale fused or host copies)", () => {
    const policy = createPolicy(SMALL, 23);
    const prompt = [...tokens(7, 40)];
    const decoder = new KvDecoder(policy, 1, { prefixCacheEntries: 0 });
    const before = Float32Array.from(decoder.add(prompt).logits);
    decoder.remove(0);
    const batch = [tokens(12, 41), tokens(12, 42)];
    policy.trainStep(batch, 1, (logp) => tf.div(tf.neg(tf.sum(logp)), 24) as tf.Scalar);
    const after = decoder.add(prompt).logits;
    const fresh = new KvDecoder(policy, 1).add(prompt).logits;
    // The step moved the logits, and the reused decoder sees exactly what a new one sees.
    let moved = 0;
    for (let j = 0; j < after.length; j++) moved = Math.max(moved, Math.abs(after[j]! - before[j]!));
    expect(moved).toBeGreaterThan(1e-4);
    after.forEach((v, j) => {
      expect(v).toBe(fresh[j]);
    });
    decoder.dispose();
    policy.dispose();
  });

  it("a step allocates no tensors that outlive it", () => {
    const policy = createPolicy({ ...SMALL, tieEmbeddings: true }, 24);
    const decoder = new KvDecoder(policy, 2);
    const slots = [decoder.add([...tokens(5, 43)]).slot, decoder.add([...tokens(9, 44)]).slot];
    decoder.step(slots, [1, 2]);
    const tensors = tf.memory().numTensors;
    for (let s = 0; s < 5; s++) decoder.step(slots, [3 + s, 4 + s]);
    expect(tf.memory().numTensors).toBe(tensors);
    // dispose frees the decoder's own tensors (the fused gate|up and the transposed tied head).
    decoder.dispose();
    expect(tf.memory().numTensors).toBe(tensors - (SMALL.layers + 1));
    policy.dispose();
  });
});

describe("prefix cache across turns", () => {
  /** Turn 1, then turn 2 whose prompt is turn 1's prompt + output + `extra`; returns both turns. */
  function twoTurns(decoder: KvDecoder, extra: number[]): Generated[] {
    const prompt1 = [...tokens(11, 40)];
    const [first] = generateBatched(decoder, [prompt1], 8);
    const prompt2 = [...prompt1, ...first!.tokens, ...extra];
    const [second] = generateBatched(decoder, [prompt2], 8);
    return [first!, second!];
  }

  it("reuses the previous turn's cache when the prompt extends it, with the same outputs as recomputing", () => {
    const policy = createPolicy(SMALL, 22);
    const extra = [...tokens(5, 41)];
    const cached = new KvDecoder(policy, 2);
    const recomputed = new KvDecoder(policy, 2, { prefixCacheEntries: 0 });
    expectSame(twoTurns(cached, extra), twoTurns(recomputed, extra));
    // Turn 2 skipped turn 1's prompt and its 7 fed-back tokens (the last sampled one was never fed).
    expect(cached.prefixStats).toMatchObject({ hits: 1, reusedTokens: 11 + 7 });
    expect(cached.prefixStats.prefilledTokens).toBe(11 + 1 + 5);
    expect(recomputed.prefixStats.hits).toBe(0);
    policy.dispose();
  });

  it("ignores kept caches a prompt does not extend, and drops them when the weights change", () => {
    const policy: TransformerPolicy = createPolicy(SMALL, 23);
    const decoder = new KvDecoder(policy, 2);
    generateBatched(decoder, [[...tokens(6, 1)]], 3);
    generateBatched(decoder, [[...tokens(6, 2), 5]], 3); // differs from the first at position 0
    expect(decoder.prefixStats.hits).toBe(0);
    const prompt = [...tokens(6, 3)];
    const [turn1] = generateBatched(decoder, [prompt], 3);
    decoder.setPolicy(policy.withVersion(1));
    generateBatched(decoder, [[...prompt, ...turn1!.tokens, 9]], 3);
    expect(decoder.prefixStats.hits).toBe(0);
    policy.dispose();
  });
});
