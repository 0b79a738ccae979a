import type { TrainerConfig } from "../../shared/config/trainer.ts";
import type { Trajectory } from "../../shared/protocol/messages.ts";
import {
  type DropReason,
  type StepRecord,
  type StepTrajectory,
  stepRecordKey,
} from "../../shared/protocol/stepRecord.ts";
import { uniformGroups } from "../../shared/rl/advantages.ts";
import { type PpoParams, ppoTokenLoss } from "../../shared/rl/ppo.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";
import type { PreparedBatch } from "./batch.ts";
import type { BufferedGroup } from "./buffer.ts";

/**
 * The per-step record `agentrl view` shows (shared/protocol/stepRecord.ts): the trainer's own
 * log-probs are copied out of the loss (ppoShard.ts, then `record`), everything else is recomputed here
 * on plain arrays, so the loss path gains one device-to-host copy per micro-batch and nothing else.
 */

/** Four decimals: log-probs and ratios to 1e-4 keep a record at a few bytes per token. */
function round4(x: number): number {
  return Math.round(x * 1e4) / 1e4;
}

/** Collects the trainer log-probs of a step's rows, one micro-batch at a time. */
export class StepRecorder {
  private readonly logp = new Map<number, Float32Array>();
  private captureMs = 0;

  /** Stores row `row`'s log-probs as copied out of the loss (by a data-parallel shard, on any thread). */
  record(row: number, logp: Float32Array): void {
    this.logp.set(row, logp);
  }

  /** Time spent copying log-probs out, where the loss did it. */
  addCaptureTime(ms: number): void {
    this.captureMs += ms;
  }

  /** Log-probs captured for batch row `row` (undefined when its micro-batch never ran). */
  logpOf(row: number): Float32Array | undefined {
    return this.logp.get(row);
  }

  get captureSeconds(): number {
    return this.captureMs / 1000;
  }
}

/** The per-row loss inputs trainOn hands the loss (behaviour or pre-step log-probs, importance weights). */
export interface RecordedRowInput {
  readonly oldLogp: ArrayLike<number>;
  readonly weights?: ArrayLike<number>;
}

export interface StepRecordInput {
  readonly experimentId: string;
  readonly step: number;
  readonly trainedVersion: number;
  readonly trainer: Pick<TrainerConfig, "estimator" | "taskAdvantageNorm" | "skipUniformGroups">;
  readonly params: PpoParams;
  readonly trajectories: readonly Trajectory[];
  /** The model's context: tokens past it were cut before training. */
  readonly contextLength: number;
  readonly batch: PreparedBatch;
  readonly rowInputs: readonly RecordedRowInput[];
  /** Groups the step took (their members that failed to load are listed as unloaded). */
  readonly groups: readonly BufferedGroup[];
  /** Groups abandoned after the group timeout, consumed by this step. */
  readonly abandoned: readonly BufferedGroup[];
  readonly losses: StepRecord["losses"];
  readonly recorder: StepRecorder;
}

/** [start, end) ranges of the indices where mask is 1. */
export function spansOf(mask: ArrayLike<number>): Array<[number, number]> {
  const spans: Array<[number, number]> = [];
  for (let i = 0; i < mask.length; i++) {
    if (!mask[i]) continue;
    const last = spans.at(-1);
    if (last && last[1] === i) last[1] = i + 1;
    else spans.push([i, i + 1]);
  }
  return spans;
}

/** Why a loaded trajectory has no batch row. */
function dropReasonOf(
  t: Trajectory,
  uniform: ReadonlySet<string>,
  skipUniformGroups: boolean,
  maxLength: number,
): DropReason {
  if (skipUniformGroups && uniform.has(t.groupId)) return "uniform group skipped";
  const generated = t.lossMask.slice(1, maxLength).some((m) => m === 1);
  return generated ? "all tokens stale" : "no trained tokens";
}

/** Builds the step's record (pure: no I/O). */
export function buildStepRecord(input: StepRecordInput): StepRecord {
  const started = performance.now();
  const { batch, params, trajectories, recorder } = input;
  const denominator = Math.max(batch.tokens, 1);
  const rowOf = new Map(batch.rows.map((row, i) => [row.trajectory, i]));
  const uniform = uniformGroups(
    trajectories.map((t) => t.reward),
    trajectories.map((t) => t.groupId),
  );
  const recorded: StepTrajectory[] = trajectories.map((t, index) => {
    const base = {
      trajectoryId: t.trajectoryId,
      groupId: t.groupId,
      task: t.task,
      reward: t.reward,
      advantage: batch.trajectoryAdvantages[index] ?? 0,
    };
    const rowIndex = rowOf.get(index);
    const row = rowIndex === undefined ? undefined : batch.rows[rowIndex];
    const logp = rowIndex === undefined ? undefined : recorder.logpOf(rowIndex);
    if (!row || rowIndex === undefined) {
      return {
        ...base,
        normalizedAdvantage: null,
        dropped: dropReasonOf(t, uniform, input.trainer.skipUniformGroups, input.contextLength),
        policyLoss: 0,
        clippedTokens: 0,
        spans: [],
        newLogp: [],
        ratio: [],
        clippedAt: [],
        importanceWeightedAt: [],
      };
    }
    const rowInput = input.rowInputs[rowIndex] as RecordedRowInput;
    const firstTrained = row.lossMask.indexOf(1);
    const newLogp: number[] = [];
    const ratio: number[] = [];
    const clippedAt: number[] = [];
    const importanceWeightedAt: number[] = [];
    let lossSum = 0;
    // Without captured log-probs (the optimizer step failed before this row ran) only the spans are known.
    const spans = logp ? spansOf(row.lossMask) : [];
    for (const [start, end] of spans)
      for (let i = start; i < end; i++) {
        const logRatio = (logp![i] as number) - (rowInput.oldLogp[i] as number);
        const r = Math.exp(logRatio);
        newLogp.push(round4(logp![i] as number));
        ratio.push(round4(r));
        if (r < 1 - params.clipLow || r > 1 + params.clipHigh) clippedAt.push(i);
        if (row.pastBound[i]) importanceWeightedAt.push(i);
        const weight = rowInput.weights ? (rowInput.weights[i] as number) : 1;
        lossSum += weight * ppoTokenLoss(logRatio, row.advantages[i] as number, params);
      }
    return {
      ...base,
      normalizedAdvantage: firstTrained >= 0 ? (row.advantages[firstTrained] as number) : null,
      policyLoss: lossSum / denominator,
      clippedTokens: clippedAt.length,
      spans,
      newLogp,
      ratio,
      clippedAt,
      importanceWeightedAt,
    };
  });
  const loaded = new Set(trajectories.map((t) => t.trajectoryId));
  const unloaded = [
    ...input.groups.flatMap((g) =>
      [...g.members.keys()]
        .filter((id) => !loaded.has(id))
        .map((trajectoryId) => ({
          trajectoryId,
          groupId: g.groupId,
          dropped: "missing or invalid" as const,
        })),
    ),
    ...input.abandoned.flatMap((g) =>
      [...g.members.keys()].map((trajectoryId) => ({
        trajectoryId,
        groupId: g.groupId,
        dropped: "group abandoned" as const,
      })),
    ),
  ];
  return {
    schemaVersion: 1,
    experimentId: input.experimentId,
    step: input.step,
    trainedVersion: input.trainedVersion,
    createdAt: new Date().toISOString(),
    params: {
      estimator: input.trainer.estimator,
      taskAdvantageNorm: input.trainer.taskAdvantageNorm,
      clipLow: params.clipLow,
      clipHigh: params.clipHigh,
      dualClip: params.dualClip,
      klCoef: params.klCoef,
    },
    losses: input.losses,
    tokens: batch.tokens,
    trajectories: recorded,
    unloaded,
    buildSeconds: recorder.captureSeconds + (performance.now() - started) / 1000,
  };
}

/** Writes the record to `steps/<experimentId>/step-NNNNNN.json` in the store; returns its size in bytes. */
export async function writeStepRecord(store: ObjectStore, record: StepRecord): Promise<number> {
  const body = JSON.stringify(record);
  await store.put(stepRecordKey(record.experimentId, record.step), body);
  return Buffer.byteLength(body);
}

/**
 * trainOn's one call: builds and writes the step's record; returns the seconds it took in all
 * (copying the log-probs included), which trainOn reports as `time/step_record_seconds`.
 */
export async function recordStep(store: ObjectStore, input: StepRecordInput): Promise<number> {
  const started = performance.now();
  await writeStepRecord(store, buildStepRecord(input));
  return input.recorder.captureSeconds + (performance.now() - started) / 1000;
}
