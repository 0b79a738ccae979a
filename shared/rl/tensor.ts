import * as tf from "@tensorflow/tfjs";
import { KL_CLAMP, type PpoParams } from "./ppo.ts";

/**
 * The PPO loss of ppo.ts as TF.js ops, for use inside `TrainablePolicy.trainStep`'s loss callback.
 * Every input is [b, T] (same shape, no broadcasting: broadcasting binary ops are ~10x slower on
 * wasm). The dual clip is written as `clipped - neg * relu(clipped + A * c)` (= min for A < 0)
 * so no boolean tensors are needed. Call it inside a tidy (trainStep does); it creates no variables.
 */

/** Tensor inputs, all [b, T]. */
export interface PpoTensorInputs {
  /** Current log-probs (the differentiated input). */
  readonly logp: tf.Tensor2D;
  readonly oldLogp: tf.Tensor2D;
  /** Needed only when klCoef > 0. */
  readonly refLogp?: tf.Tensor2D;
  readonly advantages: tf.Tensor2D;
  readonly lossMask: tf.Tensor2D;
  /** Per-token importance weights on the policy term; 1 when absent. */
  readonly weights?: tf.Tensor2D;
}

/** Scalars produced for one (micro-)batch. Sums are over its loss tokens, before any division. */
export interface PpoTensorTerms {
  /** (pgSum + klCoef * klSum) / tokenCount: this micro-batch's share of the batch loss. */
  readonly loss: tf.Scalar;
  readonly pgSum: tf.Scalar;
  readonly klSum: tf.Scalar;
  /** Loss tokens whose ratio lies outside [1 - clipLow, 1 + clipHigh]. */
  readonly clippedCount: tf.Scalar;
  /** Sum of ratio - 1 - log(ratio) (k3 estimate of KL(behaviour || current)). */
  readonly approxKlSum: tf.Scalar;
}

/**
 * Builds the loss of a (micro-)batch. `tokenCount` is the loss-token count of the *whole* batch,
 * so the micro-batch losses add up to the token-mean of the batch.
 * @example tf.tidy(() => ppoLossTensors(inputs, DEFAULT_PPO_PARAMS, 37).loss)
 */
export function ppoLossTensors(inputs: PpoTensorInputs, params: PpoParams, tokenCount: number): PpoTensorTerms {
  const { logp, oldLogp, refLogp, advantages: adv, lossMask: mask, weights } = inputs;
  if (params.klCoef > 0 && !refLogp) throw new RangeError("ppoLossTensors: klCoef > 0 needs refLogp");
  const logRatio = tf.sub(logp, oldLogp);
  const ratio = tf.exp(logRatio);
  const negAdv = tf.neg(adv);
  const unclipped = tf.mul(negAdv, ratio);
  const clippedRatio = tf.clipByValue(ratio, 1 - params.clipLow, 1 + params.clipHigh);
  const clipped = tf.maximum(unclipped, tf.mul(negAdv, clippedRatio));
  // dual clip: for A < 0, min(clipped, -A * c) = clipped - relu(clipped - (-A * c))
  const negative = tf.cast(tf.less(adv, tf.zerosLike(adv)), "float32");
  const dual = tf.sub(clipped, tf.mul(negative, tf.relu(tf.sub(clipped, tf.mul(negAdv, params.dualClip)))));
  const weighted = weights ? tf.mul(dual, weights) : dual;
  const pgSum = tf.sum(tf.mul(weighted, mask));

  let klSum: tf.Scalar = tf.scalar(0);
  if (refLogp) {
    const d = tf.sub(refLogp, logp);
    const k3 = tf.clipByValue(tf.sub(tf.sub(tf.exp(d), d), 1), -KL_CLAMP, KL_CLAMP);
    klSum = tf.sum(tf.mul(k3, mask));
  }
  const denom = Math.max(tokenCount, 1);
  const loss = tf.div(tf.add(pgSum, tf.mul(klSum, params.klCoef)), denom) as tf.Scalar;

  const outside = tf.logicalOr(tf.less(ratio, 1 - params.clipLow), tf.greater(ratio, 1 + params.clipHigh));
  const clippedCount = tf.sum(tf.mul(tf.cast(outside, "float32"), mask)) as tf.Scalar;
  const approxKlSum = tf.sum(tf.mul(tf.sub(tf.sub(ratio, 1), logRatio), mask)) as tf.Scalar;
  return { loss, pgSum: pgSum as tf.Scalar, klSum, clippedCount, approxKlSum };
}

/**
 * Packs ragged rows into a [rows.length, width] float32 tensor, zero-padded on the right and
 * truncated past `width`. Used to line trajectory arrays up with the model's [b, T] log-probs.
 * @example padRows([[1, 2], [3]], 3) // [[1, 2, 0], [3, 0, 0]]
 */
export function padRows(rows: ReadonlyArray<ArrayLike<number>>, width: number): tf.Tensor2D {
  const data = new Float32Array(rows.length * width);
  rows.forEach((row, b) => {
    const n = Math.min(row.length, width);
    for (let t = 0; t < n; t++) data[b * width + t] = row[t] as number;
  });
  return tf.tensor2d(data, [rows.length, width], "float32");
}
