import * as tf from "@tensorflow/tfjs";
import { defineShardLoss } from "../../shared/model/dataParallel.ts";

/**
 * The warm-up's weighted next-token loss as a shard loss (shared/model/dataParallel.ts), so the
 * main thread and data-parallel replicas compute it with the same code.
 */

/** One step's loss weights: per batch row, per token (0 off assistant tokens), and their total over the batch. */
export interface NllInput {
  readonly weights: readonly Float32Array[];
  readonly totalWeight: number;
}

/**
 * Weighted mean negative log-likelihood of assistant tokens for one micro-batch, divided by the
 * whole batch's total weight so micro-batch (and shard) gradients add up to the batch mean.
 * logp: [b, T] (row b is batch row rows[b], padded with 0).
 */
export function negativeLogLikelihood(
  logp: tf.Tensor2D,
  rows: readonly number[],
  weights: readonly Float32Array[],
  totalWeight: number,
): tf.Scalar {
  const [b, width] = logp.shape;
  const mask = new Float32Array(b * width);
  rows.forEach((r, i) => {
    mask.set(weights[r] as Float32Array, i * width);
  });
  // No tidy here: trainStep's variableGrads owns these intermediates (the backward pass needs them).
  return tf.div(tf.neg(tf.sum(tf.mul(logp, tf.tensor2d(mask, [b, width])))), totalWeight);
}

export default defineShardLoss<NllInput, Record<string, never>>(import.meta.url, {
  build: (input) => ({
    loss: (logp, rows) => negativeLogLikelihood(logp, rows, input.weights, input.totalWeight),
    stats: () => ({}),
  }),
  merge: () => ({}),
});
