/**
 * The PPO clipped token-level surrogate with dual clip and a k3 KL penalty to a frozen reference,
 * on plain arrays (float64 reference). Per loss-masked token, with `A` the token advantage:
 *
 *   ratio   = exp(logp - oldLogp)                       (oldLogp: rollout-time log-prob)
 *   clipped = max(-A * ratio, -A * clip(ratio, 1 - clipLow, 1 + clipHigh))
 *   pg      = A < 0 ? min(-A * dualClip, clipped) : clipped
 *   d       = refLogp - logp;  kl = clip(exp(d) - d - 1, -10, 10)
 *
 * `pg` is multiplied by an optional per-token importance weight (decoupled PPO for stale tokens);
 * both terms are token-means over every loss-masked token of the batch, and
 * `loss = pgLoss + klCoef * klLoss`. The tensor twin is in tensor.ts.
 */

/** Hyper-parameters of the loss (trainer config names). */
export interface PpoParams {
  /** Lower clip: ratios below 1 - clipLow are clipped. */
  readonly clipLow: number;
  /** Upper clip: ratios above 1 + clipHigh are clipped. */
  readonly clipHigh: number;
  /** Dual-clip constant c (> 1) bounding the loss of negative-advantage tokens at -A * c. */
  readonly dualClip: number;
  /** Weight of the KL-to-reference term; 0 disables it (no reference needed). */
  readonly klCoef: number;
}

/** The reference's defaults: clip 0.2 both sides, dual clip 3, KL 1e-4. */
export const DEFAULT_PPO_PARAMS: PpoParams = { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, klCoef: 1e-4 };

/** Bound of the k3 KL estimate per token, as in the reference code. */
export const KL_CLAMP = 10;

type Rows = ReadonlyArray<ArrayLike<number>>;

/** Inputs of the reference loss; every row set is [B][T] with the same shape. */
export interface PpoInputs {
  /** Current policy log-probs. */
  readonly logp: Rows;
  /** Behaviour (rollout-time) log-probs. */
  readonly oldLogp: Rows;
  /** Frozen reference log-probs; required when klCoef > 0. */
  readonly refLogp?: Rows;
  /** Token advantages (0 off the mask). */
  readonly advantages: Rows;
  readonly lossMask: Rows;
  /** Per-token importance weights on the policy term; 1 when absent. */
  readonly weights?: Rows;
}

/** Batch statistics of the loss (all token-means over the loss-masked tokens). */
export interface PpoResult {
  readonly pgLoss: number;
  readonly klLoss: number;
  readonly loss: number;
  /** Share of loss tokens whose ratio lies outside [1 - clipLow, 1 + clipHigh]. */
  readonly clipFrac: number;
  /** k3 estimate of KL(behaviour || current): mean of ratio - 1 - log(ratio). */
  readonly approxKl: number;
  /** Loss-masked tokens counted. */
  readonly tokens: number;
}

/** Policy-gradient loss of one token (before weighting). */
export function ppoTokenLoss(logRatio: number, advantage: number, params: PpoParams): number {
  const ratio = Math.exp(logRatio);
  const clippedRatio = Math.min(Math.max(ratio, 1 - params.clipLow), 1 + params.clipHigh);
  const clipped = Math.max(-advantage * ratio, -advantage * clippedRatio);
  return advantage < 0 ? Math.min(-advantage * params.dualClip, clipped) : clipped;
}

/** k3 KL estimate of one token, clipped to [-KL_CLAMP, KL_CLAMP]. */
export function k3Kl(logp: number, refLogp: number): number {
  const d = refLogp - logp;
  return Math.min(Math.max(Math.exp(d) - d - 1, -KL_CLAMP), KL_CLAMP);
}

/**
 * The batch loss and its statistics on plain arrays.
 * @example ppoLoss({ logp: [[0]], oldLogp: [[0]], advantages: [[1]], lossMask: [[1]] }, { ...DEFAULT_PPO_PARAMS, klCoef: 0 }).pgLoss // -1
 */
export function ppoLoss(inputs: PpoInputs, params: PpoParams): PpoResult {
  const { logp, oldLogp, refLogp, advantages, lossMask, weights } = inputs;
  if (params.klCoef > 0 && !refLogp) throw new RangeError("ppoLoss: klCoef > 0 needs refLogp");
  let tokens = 0;
  let pg = 0;
  let kl = 0;
  let clippedCount = 0;
  let approx = 0;
  for (let b = 0; b < lossMask.length; b++) {
    const mask = lossMask[b] as ArrayLike<number>;
    for (let t = 0; t < mask.length; t++) {
      if (!mask[t]) continue;
      const lp = (logp[b] as ArrayLike<number>)[t] as number;
      const logRatio = lp - ((oldLogp[b] as ArrayLike<number>)[t] as number);
      const ratio = Math.exp(logRatio);
      const weight = weights ? ((weights[b] as ArrayLike<number>)[t] as number) : 1;
      tokens += 1;
      pg += weight * ppoTokenLoss(logRatio, (advantages[b] as ArrayLike<number>)[t] as number, params);
      if (refLogp) kl += k3Kl(lp, (refLogp[b] as ArrayLike<number>)[t] as number);
      if (ratio < 1 - params.clipLow || ratio > 1 + params.clipHigh) clippedCount += 1;
      approx += ratio - 1 - logRatio;
    }
  }
  const denom = Math.max(tokens, 1);
  const pgLoss = pg / denom;
  const klLoss = kl / denom;
  return {
    pgLoss,
    klLoss,
    loss: pgLoss + params.klCoef * klLoss,
    clipFrac: clippedCount / denom,
    approxKl: approx / denom,
    tokens,
  };
}

/** How the policy term averages over a batch (`trainer.lossReduction`). */
export type LossReduction = "token-mean" | "seq-mean-token-mean";

/** What shapes the policy term beyond the PPO token loss (trainer config names). */
export interface PolicyTermShape {
  readonly lossReduction: LossReduction;
  /** Multiplier of the policy term on tokens with negative advantage, in [0, 1]. */
  readonly negativeAdvantageWeight: number;
}

/**
 * Per-token multipliers of the policy term that turn the loss's token-mean (sum over the batch's
 * loss tokens / their count) into the chosen shape. `seq-mean-token-mean` weights a row's tokens by
 * `tokens / (rows * rowTokens)`, so the sum over the batch divided by `tokens` is the mean over rows
 * of each row's token-mean; `negativeAdvantageWeight` multiplies tokens whose advantage is below 0.
 * The loss multiplies each token's policy term by its weight (as it does importance weights), so the
 * shape is exact, clipping included. Undefined when the shape is the plain token-mean (nothing to multiply).
 * @example policyTermWeights([{ advantages: [0, 1, 1], lossMask: [0, 1, 1] }, { advantages: [-1], lossMask: [1] }], { lossReduction: "seq-mean-token-mean", negativeAdvantageWeight: 1 }) // [[0, 0.75, 0.75], [1.5]]
 */
export function policyTermWeights(
  rows: ReadonlyArray<{ readonly advantages: ArrayLike<number>; readonly lossMask: ArrayLike<number> }>,
  shape: PolicyTermShape,
): number[][] | undefined {
  const perSequence = shape.lossReduction === "seq-mean-token-mean";
  if (!perSequence && shape.negativeAdvantageWeight === 1) return undefined;
  const rowTokens = rows.map((r) => countMasked(r.lossMask));
  const trainedRows = rowTokens.filter((n) => n > 0).length;
  const tokens = rowTokens.reduce((s, n) => s + n, 0);
  return rows.map((row, b) => {
    const n = rowTokens[b] as number;
    const rowWeight = perSequence && n > 0 ? tokens / (trainedRows * n) : 1;
    return Array.from(row.lossMask, (m, t) => {
      if (!m) return 0;
      const negative = (row.advantages[t] as number) < 0;
      return rowWeight * (negative ? shape.negativeAdvantageWeight : 1);
    });
  });
}

function countMasked(mask: ArrayLike<number>): number {
  let n = 0;
  for (let t = 0; t < mask.length; t++) if (mask[t]) n += 1;
  return n;
}
