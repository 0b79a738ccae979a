import * as tf from "@tensorflow/tfjs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { initBackend } from "../../shared/model/index.ts";
import { tokenLogProbs, tokenLogProbsOnDevice, tokenLogProbsOnHost } from "../../shared/model/ops.ts";
import { seededRandom } from "../../shared/rl/random.ts";

/**
 * The two forms of tokenLogProbs (issue 22: a device backend must not copy the logits to the
 * host) give the same values and gradients. Both run here on the cpu backend, where TF.js
 * differentiates the device form itself.
 */
let previous: string;
beforeAll(async () => {
  previous = tf.getBackend();
  await initBackend("cpu");
});
afterAll(async () => {
  if (previous) await tf.setBackend(previous);
});

function problem(seed: number) {
  const random = seededRandom(seed);
  const [rows, vocab] = [9, 13];
  const shape: [number, number] = [3, 4];
  const logits = tf.tensor2d(
    Float32Array.from({ length: rows * vocab }, () => 6 * (random() - 0.5)),
    [rows, vocab],
  );
  // padding cells (−1) between real ones, rows used more than once, every row in range
  const source = Int32Array.from([-1, 0, 1, 2, -1, 3, 4, -1, 5, 6, 8, -1]);
  const targets = Int32Array.from(source, () => Math.floor(random() * vocab));
  const weights = tf.tensor2d(
    Float32Array.from({ length: shape[0] * shape[1] }, () => random() - 0.3),
    shape,
  );
  return { logits, source, targets, shape, weights };
}

describe("tokenLogProbs on the device and on the host", () => {
  it.each([1, 0.7])("agree on values and gradients (temperature %s)", (temperature) => {
    const { logits, source, targets, shape, weights } = problem(5);
    const run = (form: typeof tokenLogProbsOnHost) => {
      const value = form(logits, source, targets, shape, temperature);
      const grad = tf.grad((l: tf.Tensor) =>
        tf.sum(tf.mul(form(l as tf.Tensor2D, source, targets, shape, temperature), weights)),
      )(logits);
      const out = { value: value.dataSync().slice(), grad: grad.dataSync().slice() };
      value.dispose();
      grad.dispose();
      return out;
    };
    const host = run(tokenLogProbsOnHost);
    const device = run(tokenLogProbsOnDevice);
    for (let c = 0; c < source.length; c++) {
      if (source[c]! < 0) expect(Math.abs(device.value[c]!)).toBe(0);
      else expect(device.value[c]).toBeLessThan(0);
      expect(device.value[c]).toBeCloseTo(host.value[c]!, 5);
    }
    // the gradient reaches every row a cell picks and no other
    expect(device.grad.some((g) => g !== 0)).toBe(true);
    for (let i = 0; i < host.grad.length; i++) expect(device.grad[i]).toBeCloseTo(host.grad[i]!, 5);
    const unused = 7; // no cell takes row 7
    for (let j = 0; j < 13; j++) expect(Math.abs(device.grad[unused * 13 + j]!)).toBe(0);
    tf.dispose([logits, weights]);
  });

  it("takes the host pass on the cpu backend", () => {
    const { logits, source, targets, shape, weights } = problem(9);
    const chosen = tokenLogProbs(logits, source, targets, shape, 1);
    const host = tokenLogProbsOnHost(logits, source, targets, shape, 1);
    expect(Array.from(chosen.dataSync())).toEqual(Array.from(host.dataSync()));
    tf.dispose([logits, weights, chosen, host]);
  });
});
