import type { Trajectory } from "../../shared/protocol/messages.ts";
import type { PreparedBatch } from "./batch.ts";
import type { BufferedGroup } from "./buffer.ts";
import type { StepResult } from "./loss.ts";
import type { RenamedRows } from "./renamed.ts";

/**
 * What a step reports (one metrics.jsonl line) and what it adds to the cumulative totals kept in
 * the ledger. Pure: counts in, numbers out.
 */

/** Per-task reward, success (completed with reward > 0) and counts of a step's trajectories. */
export function taskMetrics(trajectories: readonly Trajectory[]): Record<string, number> {
  const byTask = new Map<string, Trajectory[]>();
  for (const t of trajectories) byTask.set(t.task, [...(byTask.get(t.task) ?? []), t]);
  const out: Record<string, number> = {};
  for (const [task, list] of byTask) {
    const n = list.length;
    out[`task/${task}/reward`] = list.reduce((s, t) => s + t.reward, 0) / n;
    out[`task/${task}/success`] = list.filter((t) => t.status === "completed" && t.reward > 0).length / n;
    out[`task/${task}/trajectories`] = n;
    out[`task/${task}/turns`] = list.reduce((s, t) => s + t.turns, 0) / n;
    out[`task/${task}/incomplete`] = list.filter((t) => t.status !== "completed").length / n;
  }
  return out;
}

/**
 * Gateway figures of a step (only when it trained gateway trajectories): per-step sums of the
 * counts each trajectory carries (`gateway_*`), and the gateway's cumulative totals
 * (`gateway_total_*`, the newest seen: sessions, abandoned, unrewarded, refused, drift).
 */
export function gatewayMetrics(trajectories: readonly Trajectory[]): Record<string, number> {
  const from = trajectories.filter((t) => t.metrics.gateway_calls !== undefined);
  if (from.length === 0) return {};
  const sum = (key: string) => from.reduce((s, t) => s + (t.metrics[key] ?? 0), 0);
  const newest = (key: string) => Math.max(...from.map((t) => t.metrics[key] ?? 0));
  return {
    "gateway/trajectories": from.length,
    "gateway/calls": sum("gateway_calls"),
    "gateway/merged_calls": sum("gateway_merged_calls"),
    /** Trajectories from sessions that split into more than one segment. */
    "gateway/split_segments": from.filter((t) => (t.metrics.gateway_session_segments ?? 1) > 1).length,
    "gateway/drift_calls": sum("gateway_drift_calls"),
    "gateway/render_mismatches": sum("gateway_render_mismatches"),
    "gateway/sessions_total": newest("gateway_total_sessions"),
    "gateway/abandoned_total": newest("gateway_total_abandoned"),
    "gateway/unrewarded_total": newest("gateway_total_unrewarded"),
    "gateway/refused_total": newest("gateway_total_refused"),
    "gateway/drift_calls_total": newest("gateway_total_drift_calls"),
  };
}

/** Members dropped for environment or infrastructure failures, per task (`task/<t>/env_failures`) and in all. */
export function envFailureMetrics(groups: readonly BufferedGroup[]): Record<string, number> {
  const out: Record<string, number> = { "rollout/env_failures": 0 };
  for (const group of groups)
    for (const { dropped } of group.dropped.values()) {
      out["rollout/env_failures"] = (out["rollout/env_failures"] as number) + 1;
      const key = `task/${dropped.task}/env_failures`;
      out[key] = (out[key] ?? 0) + 1;
    }
  return out;
}

/** The trajectory whose fresh tokens disagree most with the trainer, and by how much (mean nats). */
export interface WorstGap {
  readonly trajectoryId: string;
  readonly gap: number;
}

/** Mean |trainer − behaviour| log-prob over all fresh tokens, and the worst trajectory's. */
export function logpGap(
  batch: PreparedBatch,
  trajectories: readonly Trajectory[],
  result: Pick<StepResult, "rowGap" | "rowFresh">,
): { mean: number; worst?: WorstGap } {
  let gap = 0;
  let fresh = 0;
  let worst: WorstGap | undefined;
  batch.rows.forEach((row, i) => {
    const rowGap = result.rowGap[i] as number;
    const rowFresh = result.rowFresh[i] as number;
    gap += rowGap;
    fresh += rowFresh;
    if (rowFresh > 0 && (!worst || rowGap / rowFresh > worst.gap))
      worst = { trajectoryId: (trajectories[row.trajectory] as Trajectory).trajectoryId, gap: rowGap / rowFresh };
  });
  return { mean: fresh > 0 ? gap / fresh : 0, worst };
}

export interface StepCounts {
  readonly trajectories: readonly Trajectory[];
  readonly batch: PreparedBatch;
  readonly result: StepResult;
  readonly logpGapFresh: number;
  readonly logpGapAlarm: boolean;
  /** Complete groups trained this step, and those abandoned (a member never came). */
  readonly groups: readonly BufferedGroup[];
  readonly abandoned: readonly BufferedGroup[];
  readonly missing: number;
  readonly duplicates: number;
  readonly rejected: number;
  readonly buffered: number;
  /** Wall seconds since the previous step ended (throughput) and spent in this one. */
  readonly secondsSinceLastStep: number;
  readonly stepSeconds: number;
  /** Imitated tokens of the step's demonstrations (`trainer.demonstrations`); absent when off. */
  readonly demonstrationTokens?: number;
  /** The step's question-renamed copies (`trainer.renamedVariants`); absent when off. */
  readonly renamed?: Pick<RenamedRows, "rows" | "tokens" | "renamedTrajectories">;
}

/** Counters this step adds to the ledger's cumulative `totals/...`. */
export function stepTotals(counts: StepCounts): Record<string, number> {
  const { batch } = counts;
  return {
    "totals/trajectories": counts.trajectories.length,
    "totals/tokens": batch.tokens,
    "totals/stale_dropped": batch.metrics["rollout/stale_dropped"] ?? 0,
    "totals/stale_dropped_trajectories": batch.metrics["rollout/stale_dropped_trajectories"] ?? 0,
    "totals/importance_weighted": batch.metrics["rollout/importance_weighted"] ?? 0,
    "totals/duplicates": counts.duplicates,
    "totals/missing": counts.missing,
    "totals/groups_abandoned": counts.abandoned.length,
    "totals/rejected": counts.rejected,
    "totals/env_failures": envFailureMetrics([...counts.groups, ...counts.abandoned])["rollout/env_failures"] ?? 0,
  };
}

/** One step's metrics line: losses, agreement, batch counters, per-task figures, throughput, totals. */
export function stepMetrics(counts: StepCounts, totals: Readonly<Record<string, number>>): Record<string, number> {
  const { batch, result, trajectories } = counts;
  const tokens = Math.max(batch.tokens, 1);
  const interval = Math.max(counts.secondsSinceLastStep, 1e-3);
  const generated = trajectories.reduce((sum, t) => sum + t.lossMask.reduce<number>((s, m) => s + m, 0), 0);
  return {
    "loss/total": result.loss,
    "loss/policy": result.sums.pg / tokens,
    "loss/kl": result.sums.kl / tokens,
    "policy/clip_frac": result.sums.clipped / tokens,
    "policy/approx_kl": result.sums.approxKl / tokens,
    ...(counts.demonstrationTokens === undefined
      ? {}
      : {
          /** Mean negative log-likelihood per imitated token of the step's expert demonstrations. */
          "loss/demonstration": result.sums.demo / Math.max(counts.demonstrationTokens, 1),
          "demonstrations/tokens": counts.demonstrationTokens,
        }),
    ...(counts.renamed === undefined
      ? {}
      : {
          /** Mean −A·log π per trained token of the renamed copies. */
          "loss/renamed": result.sums.reinforce / Math.max(counts.renamed.tokens, 1),
          "renamed/rows": counts.renamed.rows.length,
          "renamed/tokens": counts.renamed.tokens,
          "renamed/trajectories": counts.renamed.renamedTrajectories,
        }),
    "policy/grad_norm": result.gradNorm,
    "policy/logp_gap_fresh": counts.logpGapFresh,
    "policy/logp_gap_alarm": counts.logpGapAlarm ? 1 : 0,
    "policy/step_skipped": result.skipped,
    ...batch.metrics,
    "rollout/trajectories": trajectories.length,
    "rollout/groups": counts.groups.length,
    "rollout/tokens": batch.tokens,
    "rollout/duplicates": counts.duplicates,
    "rollout/missing": counts.missing,
    "rollout/groups_abandoned": counts.abandoned.length,
    "rollout/buffered": counts.buffered,
    ...envFailureMetrics([...counts.groups, ...counts.abandoned]),
    ...taskMetrics(trajectories),
    ...gatewayMetrics(trajectories),
    "throughput/trajectories_per_s": trajectories.length / interval,
    /** Generated tokens the step consumed, per wall second since the previous step. */
    "throughput/tokens_per_s": generated / interval,
    "time/step_seconds": counts.stepSeconds,
    /** Threads the optimizer step ran on (trainer.dataParallel). */
    "time/train_threads": result.threads,
    ...totals,
  };
}
