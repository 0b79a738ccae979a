import type { TrainerConfig } from "../../shared/config/trainer.ts";
import type { DataParallelTrainer } from "../../shared/model/dataParallel.ts";
import { type PpoParams, policyTermWeights } from "../../shared/rl/ppo.ts";
import { importanceWeights, type PreparedBatch } from "./batch.ts";
import { type Demonstration, demonstrationRows, demonstrationTokens } from "./demonstrations.ts";
import type { PpoShardInput, PpoShardStats } from "./ppoShard.ts";
import type { RenamedRows } from "./renamed.ts";
import type { StepRecorder } from "./stepRecord.ts";

/**
 * The loss side of a step: the log-probs the loss needs besides the trained policy's own
 * (frozen reference, pre-step "proximal" log-probs for importance-weighted tokens), then one
 * optimizer step over the batch with the PPO + KL loss (plus the demonstrations' imitation term
 * when `trainer.demonstrations` is on), collecting what the metrics report.
 */

/** One row's inputs to the loss, token-aligned with the row's tokens. */
export interface LossRow {
  /** Denominator of the ratio: the behaviour log-probs, or the proximal ones past the bound. */
  readonly oldLogp: number[];
  /**
   * Multipliers of the policy term: importance weights of tokens past the bound, times the loss
   * shape's (`trainer.lossReduction`, `trainer.negativeAdvantageWeight`); undefined when all are 1.
   */
  readonly weights?: number[];
  readonly refLogp?: Float32Array;
  readonly advantages: number[];
  readonly lossMask: number[];
  /** 1 on trained tokens of the trainer's own weights: where the agreement check looks. */
  readonly fresh: number[];
  /** Full-vocabulary behaviour log-probs, the quantity the trainer's log-probs must reproduce. */
  readonly fullLogp: number[];
  /** A demonstration row's imitation weights (1 on its assistant tokens); its other terms are 0. */
  readonly demonstration?: Float32Array;
  /**
   * A renamed copy's per-token advantages (trainer/renamed.ts): the row adds −Σ A·log π over the
   * step's token mean, the PPO term's gradient at ratio 1; its other terms are 0.
   */
  readonly reinforce?: Float32Array;
}

/** Per-token log-probs of sequences under the trained weights or the frozen KL reference. */
export type LogProbSource = (
  sequences: readonly Int32Array[],
  which: "policy" | "reference",
) => Promise<Float32Array[]>;

/**
 * The log-probs a step needs before its update: the reference's (KL term, when there is one)
 * and, when some token is past the staleness bound, the current weights' (decoupled PPO); then
 * each token's policy-term weight (importance weight times the loss shape's).
 */
export async function lossRows(
  batch: PreparedBatch,
  logProbs: LogProbSource,
  withReference: boolean,
  trainer: Pick<TrainerConfig, "importanceWeightCap" | "lossReduction" | "negativeAdvantageWeight">,
): Promise<LossRow[]> {
  const sequences = batch.rows.map((r) => r.tokens);
  const refLogp = withReference && sequences.length ? await logProbs(sequences, "reference") : undefined;
  const needsProximal = batch.rows.some((r) => r.pastBound.some((f) => f === 1));
  const proximal = needsProximal ? await logProbs(sequences, "policy") : undefined;
  const shape = policyTermWeights(batch.rows, trainer);
  return batch.rows.map((row, i) => {
    const weighted = proximal
      ? importanceWeights(row, proximal[i] as Float32Array, trainer.importanceWeightCap)
      : undefined;
    const shaped = shape?.[i] as number[] | undefined;
    const weights =
      weighted && shaped ? weighted.weights.map((w, t) => w * (shaped[t] as number)) : (weighted?.weights ?? shaped);
    return {
      oldLogp: weighted?.oldLogp ?? row.oldLogp,
      weights,
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
  /**
   * Sums over the batch's trained tokens, for token means; `demo`: the demonstrations' NLL over
   * theirs; `reinforce`: the renamed copies' −Σ A·log π over theirs.
   */
  readonly sums: { pg: number; kl: number; clipped: number; approxKl: number; demo: number; reinforce: number };
  /** Per row: sum of |trainer logp − behaviour logp| over its fresh tokens, and their count. */
  readonly rowGap: Float64Array;
  readonly rowFresh: Float64Array;
  /** Threads that computed the step (trainer.dataParallel; 1 once a replica thread was lost). */
  readonly threads: number;
}

/**
 * One optimizer step over every row (micro-batched by the policy, sharded over the trainer's
 * data-parallel threads). A non-finite gradient leaves the weights unchanged and reports `skipped`
 * instead of throwing: the batch is still consumed and counted. So does a replica thread that
 * crashed during the step (DataParallelTrainer then continues on one thread).
 */
export async function trainOnRows(
  parallel: DataParallelTrainer<PpoShardInput, PpoShardStats>,
  batch: PreparedBatch,
  rows: readonly LossRow[],
  temperature: number,
  params: PpoParams,
  onError: (error: unknown) => void,
  extras: {
    /** Receives each batch row's trainer log-probs (for the step record). */
    readonly recorder?: StepRecorder;
    /**
     * Expert episodes imitated in the same step, after the batch's rows (`trainer.demonstrations`);
     * `alone`: they are all the step trains on (the RL loss is computed for its statistics only).
     */
    readonly demonstrations?: {
      readonly of: readonly Demonstration[];
      readonly coef: number;
      readonly alone?: boolean;
    };
    /** Question-renamed copies of the batch's trajectories (`trainer.renamedVariants`), after its rows. */
    readonly renamed?: RenamedRows;
  } = {},
): Promise<StepResult> {
  const { recorder, demonstrations, renamed } = extras;
  const empty = { pg: 0, kl: 0, clipped: 0, approxKl: 0, demo: 0, reinforce: 0 };
  const imitated = demonstrations && demonstrations.coef > 0 ? demonstrations.of : [];
  const allRows = [...rows, ...(renamed?.rows ?? []), ...demonstrationRows(imitated)];
  const rowGap = new Float64Array(allRows.length);
  const rowFresh = new Float64Array(allRows.length);
  const sequences = [
    ...batch.rows.map((r) => r.tokens),
    ...(renamed?.sequences ?? []),
    ...imitated.map((d) => d.tokens),
  ];
  if (sequences.length === 0)
    return { loss: 0, gradNorm: 0, skipped: 0, sums: empty, rowGap, rowFresh, threads: parallel.threads };
  try {
    const result = await parallel.trainStep(sequences, temperature, {
      rows: allRows,
      params,
      tokens: batch.tokens + (renamed?.tokens ?? 0),
      captureLogp: recorder !== undefined,
      ...(imitated.length > 0
        ? {
            demonstration: {
              coef: demonstrations?.coef ?? 0,
              tokens: demonstrationTokens(imitated),
              alone: demonstrations?.alone ?? false,
            },
          }
        : {}),
    });
    const { stats } = result;
    for (const [row, logp] of stats.logp) if (row < rows.length) recorder?.record(row, logp);
    recorder?.addCaptureTime(stats.captureMs);
    return {
      loss: result.loss,
      gradNorm: result.gradNorm,
      skipped: 0,
      sums: stats.sums,
      rowGap: stats.rowGap,
      rowFresh: stats.rowFresh,
      threads: result.threads,
    };
  } catch (error) {
    onError(error);
    return { loss: 0, gradNorm: 0, skipped: 1, sums: empty, rowGap, rowFresh, threads: parallel.threads };
  }
}
