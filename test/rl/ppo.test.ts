import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_PPO_PARAMS, k3Kl, type PpoParams, ppoLoss, ppoTokenLoss } from "../../shared/rl/index.ts";
import { padRows, ppoLossTensors } from "../../shared/rl/tensor.ts";

const params: PpoParams = DEFAULT_PPO_PARAMS;

beforeAll(async () => {
  await tf.setBackend("cpu");
});

describe("PPO token loss (hand-worked)", () => {
  it("inside the clip range the loss is -A * ratio", () => {
    // log ratio ln(1.1): ratio 1.1 within [0.8, 1.2]; A = 2 -> -2.2
    expect(ppoTokenLoss(Math.log(1.1), 2, params)).toBeCloseTo(-2.2, 12);
  });

  it("positive advantage, ratio above 1 + clip: the clipped term wins", () => {
    // ratio 1.5, A = 1: max(-1.5, -1.2) = -1.2 (no incentive to push further)
    expect(ppoTokenLoss(Math.log(1.5), 1, params)).toBeCloseTo(-1.2, 12);
  });

  it("negative advantage, ratio below 1 - clip: the clipped term wins", () => {
    // ratio 0.5, A = -1: max(0.5, 0.8) = 0.8; dual clip min(3, 0.8) = 0.8
    expect(ppoTokenLoss(Math.log(0.5), -1, params)).toBeCloseTo(0.8, 12);
  });

  it("negative advantage with a huge ratio: the dual clip caps the loss at -A * c", () => {
    // ratio 10, A = -0.5: max(5, 0.6) = 5; dual clip min(0.5 * 3, 5) = 1.5
    expect(ppoTokenLoss(Math.log(10), -0.5, params)).toBeCloseTo(1.5, 12);
  });

  it("k3 KL: zero at equality, positive otherwise, clipped at 10", () => {
    expect(k3Kl(-1, -1)).toBe(0);
    // d = ref - logp = 1: e - 1 - 1 = 0.718281...
    expect(k3Kl(-2, -1)).toBeCloseTo(Math.E - 2, 12);
    expect(k3Kl(-30, 0)).toBe(10);
  });
});

describe("PPO batch loss (array)", () => {
  it("hand-worked batch: token-mean over masked tokens, clip fraction, weights", () => {
    // tokens (masked): row0 t1: ratio 1, A 1 -> -1;  row0 t2: ratio 1.5, A 1 -> -1.2 (clipped)
    //                  row1 t0: ratio 0.5, A -1 -> 0.8 (clipped);  row1 t2 unmasked (ignored)
    // pg = (-1 - 1.2 + 0.8) / 3 = -0.466666...; clip_frac = 2/3
    const inputs = {
      logp: [
        [0, -1, Math.log(1.5) - 1],
        [Math.log(0.5) - 1, 0, 99],
      ],
      oldLogp: [
        [0, -1, -1],
        [-1, 0, 0],
      ],
      advantages: [
        [0, 1, 1],
        [-1, 0, -1],
      ],
      lossMask: [
        [0, 1, 1],
        [1, 0, 0],
      ],
    };
    const out = ppoLoss(inputs, { ...params, klCoef: 0 });
    expect(out.tokens).toBe(3);
    expect(out.pgLoss).toBeCloseTo(-1.4 / 3, 12);
    expect(out.loss).toBe(out.pgLoss);
    expect(out.clipFrac).toBeCloseTo(2 / 3, 12);
    // importance weights scale each token's policy term: 0.5 on row0 t2 -> (-1 - 0.6 + 0.8) / 3
    const weighted = ppoLoss(
      {
        ...inputs,
        weights: [
          [1, 1, 0.5],
          [1, 1, 1],
        ],
      },
      { ...params, klCoef: 0 },
    );
    expect(weighted.pgLoss).toBeCloseTo(-0.8 / 3, 12);
  });

  it("an empty mask gives finite zeros, and KL without a reference is refused", () => {
    const out = ppoLoss({ logp: [[0]], oldLogp: [[0]], advantages: [[0]], lossMask: [[0]] }, { ...params, klCoef: 0 });
    expect([out.pgLoss, out.klLoss, out.clipFrac, out.tokens]).toEqual([0, 0, 0, 0]);
    expect(() => ppoLoss({ logp: [[0]], oldLogp: [[0]], advantages: [[0]], lossMask: [[1]] }, params)).toThrow(
      /refLogp/,
    );
  });
});

describe("PPO loss (tensor)", () => {
  const rows = {
    logp: [
      [0, -1.3, -0.4, -2.2],
      [-0.7, -0.2, -1.9, 0],
    ],
    oldLogp: [
      [0, -1.0, -0.45, -1.5],
      [-1.1, -0.25, -1.2, 0],
    ],
    refLogp: [
      [0, -1.1, -0.5, -2.0],
      [-0.9, -0.3, -1.5, 0],
    ],
    advantages: [
      [0, 0.8, 0.8, 0.8],
      [-1.3, -1.3, -1.3, 0],
    ],
    lossMask: [
      [0, 1, 1, 1],
      [1, 1, 1, 0],
    ],
    weights: [
      [1, 1, 0.7, 1],
      [1, 0.4, 1, 1],
    ],
  };
  const tokens = 6;
  const p: PpoParams = { ...params, klCoef: 0.5 };

  function tensorLoss(logp: tf.Tensor2D): tf.Scalar {
    return ppoLossTensors(
      {
        logp,
        oldLogp: padRows(rows.oldLogp, 4),
        refLogp: padRows(rows.refLogp, 4),
        advantages: padRows(rows.advantages, 4),
        lossMask: padRows(rows.lossMask, 4),
        weights: padRows(rows.weights, 4),
      },
      p,
      tokens,
    ).loss;
  }

  it("matches the array reference, weights and KL included", () => {
    const ref = ppoLoss(rows, p);
    const value = tf.tidy(() => tensorLoss(padRows(rows.logp, 4)).dataSync()[0] as number);
    expect(value).toBeCloseTo(ref.loss, 5);
  });

  it("its gradient matches central finite differences of the float64 reference", () => {
    const grad = tf.tidy(() =>
      tf
        .grad((x: tf.Tensor) => tensorLoss(x as tf.Tensor2D))(padRows(rows.logp, 4))
        .arraySync(),
    );
    const h = 1e-6;
    rows.lossMask.forEach((mask, b) => {
      mask.forEach((m, t) => {
        const shifted = (delta: number) =>
          ppoLoss(
            { ...rows, logp: rows.logp.map((row, i) => row.map((v, j) => (i === b && j === t ? v + delta : v))) },
            p,
          ).loss;
        const numeric = (shifted(h) - shifted(-h)) / (2 * h);
        const analytic = (grad as number[][])[b]?.[t] as number;
        if (!m) expect(Math.abs(analytic)).toBe(0);
        expect(Math.abs(analytic - numeric)).toBeLessThan(1e-4);
      });
    });
  });

  it("leaves no tensors behind inside a tidy", () => {
    const before = tf.memory().numTensors;
    tf.tidy(() => {
      tensorLoss(padRows(rows.logp, 4));
    });
    expect(tf.memory().numTensors).toBe(before);
  });

  it("padRows zero-pads and truncates", () => {
    const t = padRows([[1, 2, 3], [4]], 2);
    expect(t.arraySync()).toEqual([
      [1, 2],
      [4, 0],
    ]);
    t.dispose();
  });
});
