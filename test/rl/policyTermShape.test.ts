import { describe, expect, it } from "vitest";
import { DEFAULT_PPO_PARAMS, policyTermWeights, ppoLoss } from "../../shared/rl/index.ts";
import type { PreparedBatch } from "../../trainer-image/trainer/batch.ts";
import { lossRows } from "../../trainer-image/trainer/loss.ts";

const params = { ...DEFAULT_PPO_PARAMS, klCoef: 0 };

// Two trajectories of one group: a short success (2 trained tokens) and a long failure (6).
const success = { advantages: [0, 1, 1], lossMask: [0, 1, 1] };
const failure = { advantages: [-1, -1, -1, -1, -1, -1, 0], lossMask: [1, 1, 1, 1, 1, 1, 0] };
const rows = [success, failure];
/** Every ratio 1, so each token's loss is -A. */
const atRatioOne = (weights?: number[][]) =>
  ppoLoss(
    {
      logp: rows.map((r) => r.lossMask.map(() => 0)),
      oldLogp: rows.map((r) => r.lossMask.map(() => 0)),
      advantages: rows.map((r) => r.advantages),
      lossMask: rows.map((r) => r.lossMask),
      weights,
    },
    params,
  ).pgLoss;

describe("policy-term shape", () => {
  it("the plain token-mean needs no weights", () => {
    expect(policyTermWeights(rows, { lossReduction: "token-mean", negativeAdvantageWeight: 1 })).toBeUndefined();
    // token-mean: the long failure dominates, (-2 + 6) / 8
    expect(atRatioOne()).toBeCloseTo(0.5, 12);
  });

  it("seq-mean-token-mean: each trajectory's token-mean, then their mean", () => {
    const weights = policyTermWeights(rows, { lossReduction: "seq-mean-token-mean", negativeAdvantageWeight: 1 });
    // 8 tokens, 2 rows: the success's tokens weigh 8 / (2 * 2) = 2, the failure's 8 / (2 * 6)
    expect(weights?.[0]).toEqual([0, 2, 2]);
    expect(weights?.[1]?.slice(0, 6).every((w) => Math.abs(w - 8 / 12) < 1e-12)).toBe(true);
    expect(weights?.[1]?.[6]).toBe(0);
    // mean(-1, +1) = 0: the failure's length no longer outweighs the success
    expect(atRatioOne(weights)).toBeCloseTo(0, 12);
  });

  it("negativeAdvantageWeight scales only the tokens below the baseline", () => {
    const none = policyTermWeights(rows, { lossReduction: "token-mean", negativeAdvantageWeight: 0 });
    expect(none).toEqual([
      [0, 1, 1],
      [0, 0, 0, 0, 0, 0, 0],
    ]);
    expect(atRatioOne(none)).toBeCloseTo(-2 / 8, 12);
    const half = policyTermWeights(rows, { lossReduction: "token-mean", negativeAdvantageWeight: 0.5 });
    expect(atRatioOne(half)).toBeCloseTo((-2 + 3) / 8, 12);
    const both = policyTermWeights(rows, { lossReduction: "seq-mean-token-mean", negativeAdvantageWeight: 0 });
    expect(atRatioOne(both)).toBeCloseTo(-0.5, 12);
  });

  it("a row with no trained token does not count as a trajectory", () => {
    const weights = policyTermWeights([success, { advantages: [1], lossMask: [0] }], {
      lossReduction: "seq-mean-token-mean",
      negativeAdvantageWeight: 1,
    });
    expect(weights).toEqual([[0, 1, 1], [0]]);
  });
});

describe("lossRows applies the shape", () => {
  const row = (advantages: number[], pastBound: number[]) => ({
    trajectory: 0,
    tokens: Int32Array.from(advantages.map((_, i) => i + 1)),
    lossMask: advantages.map((_, i) => (i === 0 ? 0 : 1)),
    oldLogp: advantages.map(() => -1),
    fullLogp: advantages.map(() => -1),
    advantages,
    pastBound,
    fresh: pastBound.map((p, i) => (p || i === 0 ? 0 : 1)),
  });
  const batch: PreparedBatch = {
    rows: [row([0, 1, 1], [0, 0, 1]), row([0, -1, -1, -1, -1], [0, 0, 0, 0, 0])],
    trajectoryAdvantages: [1, -1],
    tokens: 6,
    staleness: [],
    metrics: {},
  };
  // pre-step log-probs -0.5 where the behaviour's were -1: importance weight min(e^0.5, cap 2)
  const logProbs = async (sequences: readonly Int32Array[]) =>
    sequences.map((s) => new Float32Array(s.length).fill(-0.5));

  it("multiplies the importance weights of tokens past the bound by the shape's", async () => {
    const shaped = await lossRows(batch, logProbs, false, {
      importanceWeightCap: 2,
      lossReduction: "seq-mean-token-mean",
      negativeAdvantageWeight: 0.5,
    });
    // 6 tokens over 2 rows: the first row's weigh 6 / (2 * 2) = 1.5, the second's 6 / (2 * 4) * 0.5
    expect(shaped[0]?.weights?.[1]).toBeCloseTo(1.5, 12);
    expect(shaped[0]?.weights?.[2]).toBeCloseTo(1.5 * Math.exp(0.5), 6);
    expect(shaped[0]?.oldLogp[2]).toBeCloseTo(-0.5, 6);
    expect(shaped[1]?.weights?.slice(1)).toEqual([0.375, 0.375, 0.375, 0.375]);
  });

  it("leaves the weights to staleness alone under the plain shape", async () => {
    const plain = await lossRows(batch, logProbs, false, {
      importanceWeightCap: 2,
      lossReduction: "token-mean",
      negativeAdvantageWeight: 1,
    });
    expect(plain[0]?.weights?.[1]).toBe(1);
    expect(plain[0]?.weights?.[2]).toBeCloseTo(Math.exp(0.5), 6);
    expect(plain[1]?.weights).toEqual([1, 1, 1, 1, 1]);
  });
});
