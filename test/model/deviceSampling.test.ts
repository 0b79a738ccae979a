import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { drawnTokens, drawOnDevice } from "../../shared/model/deviceSampling.ts";
import { initBackend } from "../../shared/model/index.ts";
import { drawToken } from "../../shared/model/sampling.ts";
import type { DrawnToken, TokenDraw } from "../../shared/model/types.ts";
import { seededRandom } from "../../shared/rl/random.ts";

/**
 * The device decoders' sampler (TF.js ops, run here on the cpu backend; test/model/webgpu.test.ts
 * runs it on webgpu) against the host's drawToken: the same token from the same uniform number,
 * log-probs within float32 rounding.
 */

const VOCAB = 300;

function randomLogits(rows: number, seed: number, spread: number): Float32Array {
  const random = seededRandom(seed);
  return Float32Array.from({ length: rows * VOCAB }, () => (random() - 0.5) * spread);
}

function onDevice(logits: Float32Array, draws: TokenDraw[]): DrawnToken[] {
  const input = tf.tensor2d(logits, [draws.length, VOCAB]);
  const out = drawOnDevice(input, draws);
  const values = out.dataSync() as Float32Array;
  input.dispose();
  out.dispose();
  return drawnTokens(values);
}

describe("drawing on the device", () => {
  beforeAll(async () => {
    await initBackend("cpu");
  });

  it.each([
    ["greedy", 0, 1],
    ["full vocabulary, T=1", 1, 1],
    ["full vocabulary, T=0.7", 0.7, 1],
    ["nucleus 0.9, T=1", 1, 0.9],
    ["nucleus 0.5, T=1.3", 1.3, 0.5],
  ])("%s: the host's token and log-probs from the same uniform numbers", (_, temperature, topP) => {
    const rows = 16;
    let tokensSeen = 0;
    for (const [seed, spread] of [
      [1, 2],
      [2, 12],
      [3, 40],
    ] as const) {
      const logits = randomLogits(rows, seed, spread);
      const random = seededRandom(seed + 100);
      const draws = Array.from({ length: rows }, () => ({ temperature, topP, uniform: random() }));
      const device = onDevice(logits, draws);
      draws.forEach((draw, i) => {
        const host = drawToken(logits.subarray(i * VOCAB, (i + 1) * VOCAB), draw);
        const got = device[i]!;
        expect(got.token).toBe(host.token);
        expect(got.logprob).toBeCloseTo(host.logprob, 4);
        expect(got.sampledLogprob).toBeCloseTo(host.sampledLogprob, 4);
        tokensSeen += 1;
      });
    }
    expect(tokensSeen).toBe(rows * 3);
  });

  it("draws each row by its own settings in one batch, and the nucleus keeps to its tokens", () => {
    const logits = randomLogits(4, 7, 30);
    const draws: TokenDraw[] = [
      { temperature: 0, topP: 1, uniform: 0.3 },
      { temperature: 1, topP: 0.3, uniform: 0.999 },
      { temperature: 0.5, topP: 1, uniform: 0.5 },
      { temperature: 1, topP: 0.3, uniform: 0 },
    ];
    const device = onDevice(logits, draws);
    expect(device.map((d) => d.token)).toEqual(
      draws.map((draw, i) => drawToken(logits.subarray(i * VOCAB, (i + 1) * VOCAB), draw).token),
    );
    expect(device[0]!.sampledLogprob).toBe(0);
    // The nucleus's draw at the top of the range and at its bottom both stay within the nucleus's mass.
    expect(device[1]!.sampledLogprob).toBeLessThanOrEqual(0);
    expect(device[1]!.sampledLogprob).toBeGreaterThan(device[1]!.logprob);
  });

  it("frees what it allocates, and refuses a draw count that does not match the rows", () => {
    const logits = randomLogits(3, 9, 5);
    const draws = Array.from({ length: 3 }, () => ({ temperature: 1, topP: 0.8, uniform: 0.4 }));
    const before = tf.memory().numTensors;
    onDevice(logits, draws);
    expect(tf.memory().numTensors).toBe(before);
    const input = tf.tensor2d(logits, [3, VOCAB]);
    expect(() => drawOnDevice(input, draws.slice(1))).toThrow(/3 rows but 2 draws/);
    input.dispose();
  });
});
