import * as tf from "@tensorflow/tfjs";
import type { TrainerConfig } from "../../shared/config/trainer.ts";
import type { TransformerPolicy } from "../../shared/model/transformer.ts";
import type { TrainablePolicy } from "../../shared/model/types.ts";
import type { PpoParams } from "../../shared/rl/ppo.ts";
import { padRows, ppoLossTensors } from "../../shared/rl/tensor.ts";
import { importanceWeights, type PreparedBatch } from "./batch.ts";

/**
 * The loss side of a step: the log-probs the loss needs besides the trained policy's own
 * (frozen reference, pre-step "proximal" log-probs for importance-weighted tokens), then one
 * optimizer step over the batch with the PPO + KL loss, collecting what the metrics report.
 */

/** One row's inputs to the loss, token-aligned with the row's tokens. */
export interface LossRow {
  /** Denominator of the ratio: the behaviour log-probs, or the proximal ones past the bound. */
  readonly oldLogp: number[];
  /** Importance weights of tokens past the bound (1 elsewhere); undefined when no token is past it. */
  readonly weights?: number[];
  readonly refLogp?: Float32Array;
  readonly advantages: number[];
  readonly lossMask: number[];
  /** 1 on trained tokens of the trainer's own weights: where the agreement check looks. */
  readonly fresh: number[];
  /** Full-vocabulary behaviour log-probs, the quantity the trainer's log-probs must reproduce. */
  readonly fullLogp: number[];
}

/**
 * The log-probs a step needs before its update: the reference's (KL term, when there is one)
 * and, when some token is past the staleness bound, the current weights' (decoupled PPO).
 */
export function lossRows(
  batch: PreparedBatch,
  policy: TrainablePolicy,
  reference: TrainablePolicy | undefined,
  temperature: number,
  trainer: Pick<TrainerConfig, "importanceWeightCap">,
): LossRow[] {
  const sequences = batch.rows.map((r) => r.tokens);
  const refLogp = reference && sequences.length ? reference.logProbs(sequences, temperature) : undefined;
  const needsProximal = batch.rows.some((r) => r.pastBound.some((f) => f === 1));
  const proximal = needsProximal ? policy.logProbs(sequences, temperature) : undefined;
  return batch.rows.map((row, i) => {
    const weighted = proximal
      ? importanceWeights(row, proximal[i] as Float32Array, trainer.importanceWeightCap)
      : undefined;
    return {
      oldLogp: weighted?.oldLogp ?? row.oldLogp,
      weights: weighted?.weights,
      refLogp: refLogp?.[i],
      advantages: row.advantages,
      lossMask: row.lossMask,
      fresh: row.fresh,
      fullLogp: row.fullLogp,
    };
  });
}

/** What one optimizer step reports. */
export interface StepResult {
  readonly loss: number;
  readonly gradNorm: number;
  /** 1 when a non-finite gradient left the weights unchanged. */
  readonly skipped: number;
  /** Sums over the batch's trained tokens, for token means. */
  readonly sums: { pg: number; kl: number; clipped: number; approxKl: number };
  /** Per row: sum of |trainer logp − behaviour logp| over its fresh tokens, and their count. */
  readonly rowGap: Float64Array;
  readonly rowFresh: Float64Array;
}

/**
 * One optimizer step over every row (micro-batched by the policy). A non-finite gradient
 * leaves the weights unchanged and reports `skipped` instead of throwing: the batch is still
 * consumed and counted.
 */
export function trainOnRows(
  policy: TransformerPolicy,
  batch: PreparedBatch,
  rows: readonly LossRow[],
  temperature: number,
  params: PpoParams,
  onError: (error: unknown) => void,
  /** Sees each micro-batch's trainer log-probs ([picked.length, T]) before the loss uses them. */
  onLogp?: (picked: readonly number[], logp: tf.Tensor2D) => void,
): StepResult {
  const sums = { pg: 0, kl: 0, clipped: 0, approxKl: 0 };
  const rowGap = new Float64Array(rows.length);
  const rowFresh = new Float64Array(rows.length);
  const sequences = batch.rows.map((r) => r.tokens);
  const withReference = rows.some((r) => r.refLogp !== undefined);
  const weighted = rows.some((r) => r.weights !== undefined);
  if (sequences.length === 0) return { loss: 0, gradNorm: 0, skipped: 0, sums, rowGap, rowFresh };
  try {
    const result = policy.trainStep(sequences, temperature, (logp, picked) => {
      const width = logp.shape[1];
      onLogp?.(picked, logp);
      const pad = (column: (row: LossRow) => ArrayLike<number>) =>
        padRows(
          picked.map((r) => column(rows[r] as LossRow)),
          width,
        );
      const terms = ppoLossTensors(
        {
          logp,
          oldLogp: pad((r) => r.oldLogp),
          refLogp: withReference ? pad((r) => r.refLogp ?? []) : undefined,
          advantages: pad((r) => r.advantages),
          lossMask: pad((r) => r.lossMask),
          weights: weighted ? pad((r) => r.weights ?? r.lossMask.map(() => 1)) : undefined,
        },
        params,
        batch.tokens,
      );
      // rollout/trainer agreement on tokens of the trainer's own weights, per row
      const fresh = pad((r) => r.fresh);
      const gap = tf.sum(
        tf.mul(
          tf.abs(
            tf.sub(
              logp,
              pad((r) => r.fullLogp),
            ),
          ),
          fresh,
        ),
        1,
      );
      const stats = tf.stack([terms.pgSum, terms.klSum, terms.clippedCount, terms.approxKlSum]).dataSync();
      sums.pg += stats[0] as number;
      sums.kl += stats[1] as number;
      sums.clipped += stats[2] as number;
      sums.approxKl += stats[3] as number;
      const gaps = gap.dataSync();
      const counts = tf.sum(fresh, 1).dataSync();
      picked.forEach((r, j) => {
        rowGap[r] = (rowGap[r] as number) + (gaps[j] as number);
        rowFresh[r] = (rowFresh[r] as number) + (counts[j] as number);
      });
      return terms.loss;
    });
    return { loss: result.loss, gradNorm: result.gradNorm, skipped: 0, sums, rowGap, rowFresh };
  } catch (error) {
    onError(error);
    return { loss: 0, gradNorm: 0, skipped: 1, sums, rowGap, rowFresh };
  }
}
