import * as tf from "@tensorflow/tfjs";
import { defineShardLoss } from "../../shared/model/dataParallel.ts";
import type { PpoParams } from "../../shared/rl/ppo.ts";
import { padRows, ppoLossTensors } from "../../shared/rl/tensor.ts";
import type { LossRow } from "./loss.ts";

/**
 * The trainer's PPO + KL loss (and the demonstrations' imitation term) as a shard loss
 * (shared/model/dataParallel.ts): built the same on the main thread and on data-parallel
 * replicas, it returns each micro-batch's share of the batch loss and collects the step's
 * statistics (token sums, the per-row rollout/trainer gap, and the trainer log-probs the step
 * record shows).
 */

/** Everything the loss of one step needs; the same value on every thread. */
export interface PpoShardInput {
  /** One per batch row, token-aligned with its tokens. */
  readonly rows: readonly LossRow[];
  readonly params: PpoParams;
  /**
   * Loss tokens of the whole batch (renamed copies' included): each micro-batch's sum is divided by
   * it, so shard losses add up.
   */
  readonly tokens: number;
  /** Copy each row's trainer log-probs out (for the step record). */
  readonly captureLogp: boolean;
  /**
   * Demonstration rows (those with `demonstration` weights) add `coef` times their mean negative
   * log-likelihood over their `tokens` imitated tokens; `alone`: that term is the whole loss (the
   * PPO + KL terms are still summed for the metrics, and train nothing).
   */
  readonly demonstration?: { readonly coef: number; readonly tokens: number; readonly alone?: boolean };
}

/** What a shard collected. */
export interface PpoShardStats {
  /**
   * Sums over the shard's trained tokens; `demo`: the demonstrations' negative log-likelihood;
   * `reinforce`: the renamed copies' −Σ A·log π.
   */
  readonly sums: { pg: number; kl: number; clipped: number; approxKl: number; demo: number; reinforce: number };
  /** Per batch row (0 on rows of other shards): sum of |trainer − behaviour| log-prob over fresh tokens, and their count. */
  readonly rowGap: Float64Array;
  readonly rowFresh: Float64Array;
  /** Captured log-probs per batch row ([padded width]), when asked. */
  readonly logp: Array<[number, Float32Array]>;
  readonly captureMs: number;
}

function build(input: PpoShardInput) {
  const { rows, params, tokens } = input;
  const withReference = rows.some((r) => r.refLogp !== undefined);
  const weighted = rows.some((r) => r.weights !== undefined);
  const imitation = input.demonstration;
  const reinforcing = rows.some((r) => r.reinforce !== undefined);
  const sums = { pg: 0, kl: 0, clipped: 0, approxKl: 0, demo: 0, reinforce: 0 };
  const rowGap = new Float64Array(rows.length);
  const rowFresh = new Float64Array(rows.length);
  const logps: Array<[number, Float32Array]> = [];
  let captureMs = 0;
  return {
    loss(logp: tf.Tensor2D, picked: readonly number[]): tf.Scalar {
      const width = logp.shape[1];
      if (input.captureLogp) {
        const started = performance.now();
        const data = logp.dataSync() as Float32Array;
        picked.forEach((r, b) => {
          logps.push([r, data.slice(b * width, (b + 1) * width)]);
        });
        captureMs += performance.now() - started;
      }
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
        tokens,
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
      /** −Σ w·log π over the micro-batch, `w` a per-token weight column (0 on rows without one). */
      const negWeightedLogp = (column: (row: LossRow) => ArrayLike<number> | undefined): tf.Scalar => {
        const weights = pad((r) => column(r) ?? []);
        return tf.neg(tf.sum(tf.mul(logp, weights))) as tf.Scalar;
      };
      // the imitation term of demonstration rows; the renamed copies' policy term, −Σ A·log π
      const demoSum = imitation ? negWeightedLogp((r) => r.demonstration) : tf.scalar(0);
      const reinforceSum = reinforcing ? negWeightedLogp((r) => r.reinforce) : tf.scalar(0);
      const stats = tf
        .stack([terms.pgSum, terms.klSum, terms.clippedCount, terms.approxKlSum, demoSum, reinforceSum])
        .dataSync();
      sums.pg += stats[0] as number;
      sums.kl += stats[1] as number;
      sums.clipped += stats[2] as number;
      sums.approxKl += stats[3] as number;
      sums.demo += stats[4] as number;
      sums.reinforce += stats[5] as number;
      const gaps = gap.dataSync();
      const counts = tf.sum(fresh, 1).dataSync();
      picked.forEach((r, j) => {
        rowGap[r] = (rowGap[r] as number) + (gaps[j] as number);
        rowFresh[r] = (rowFresh[r] as number) + (counts[j] as number);
      });
      const rlLoss = reinforcing
        ? (tf.add(terms.loss, tf.div(reinforceSum, Math.max(tokens, 1))) as tf.Scalar)
        : terms.loss;
      if (!imitation) return rlLoss;
      const imitationLoss = tf.mul(demoSum, imitation.coef / Math.max(imitation.tokens, 1)) as tf.Scalar;
      return imitation.alone ? imitationLoss : (tf.add(rlLoss, imitationLoss) as tf.Scalar);
    },
    stats: (): PpoShardStats => ({ sums: { ...sums }, rowGap, rowFresh, logp: logps, captureMs }),
  };
}

function addInto(a: Float64Array, b: Float64Array): Float64Array {
  return a.map((x, i) => x + (b[i] as number));
}

export default defineShardLoss<PpoShardInput, PpoShardStats>(import.meta.url, {
  build,
  merge: (a, b) => ({
    sums: {
      pg: a.sums.pg + b.sums.pg,
      kl: a.sums.kl + b.sums.kl,
      clipped: a.sums.clipped + b.sums.clipped,
      approxKl: a.sums.approxKl + b.sums.approxKl,
      demo: a.sums.demo + b.sums.demo,
      reinforce: a.sums.reinforce + b.sums.reinforce,
    },
    rowGap: addInto(a.rowGap, b.rowGap),
    rowFresh: addInto(a.rowFresh, b.rowFresh),
    logp: [...a.logp, ...b.logp],
    captureMs: a.captureMs + b.captureMs,
  }),
});
