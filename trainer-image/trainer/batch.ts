import type { TrainerConfig } from "../../shared/config/trainer.ts";
import type { Trajectory } from "../../shared/protocol/messages.ts";
import { broadcastToTokens, computeAdvantages, normalizeByTask } from "../../shared/rl/advantages.ts";

/**
 * Turns a step's trajectories into the arrays the loss needs, top to bottom:
 * staleness per token -> advantages (estimator over every trajectory, so a group keeps its
 * baseline even when some members' tokens were dropped) -> broadcast to trained tokens -> task
 * advantage normalization. Pure: no model, no I/O.
 */

/** A trajectory's row in the step: token arrays cut to the model's context. */
export interface BatchRow {
  /** Index into the step's trajectory list. */
  readonly trajectory: number;
  readonly tokens: Int32Array;
  /** Loss mask after the staleness bound (dropped tokens are 0). */
  readonly lossMask: number[];
  /** Behaviour log-probs; replaced by the pre-step log-probs on importance-weighted tokens. */
  readonly oldLogp: number[];
  readonly advantages: number[];
  /** 1 where a token is past the bound and kept with importance weighting. */
  readonly pastBound: number[];
}

export interface PreparedBatch {
  /** Rows with at least one trained token (others add nothing to the loss and are not run). */
  readonly rows: BatchRow[];
  /** Trajectory-level advantages, aligned with the input trajectories. */
  readonly trajectoryAdvantages: number[];
  /** Trained (loss-masked) tokens of the step: the token-mean denominator. */
  readonly tokens: number;
  /** Counters of this step (`rollout/...`, `staleness/<k>`). */
  readonly metrics: Record<string, number>;
}

/** Staleness of a token: versions between the trainer's weights and the version that generated it. */
export function tokenStaleness(currentVersion: number, tokenVersion: number): number {
  return Math.max(0, currentVersion - tokenVersion);
}

/**
 * Prepares a step. `currentVersion` is the version of the trainer's weights; tokens more than
 * `maxStaleness` versions older are dropped (`stalePolicy: drop`) or flagged for importance
 * weighting. Sequences are cut to `maxLength` tokens.
 */
export function prepareBatch(
  trajectories: readonly Trajectory[],
  currentVersion: number,
  trainer: Pick<
    TrainerConfig,
    "estimator" | "taskAdvantageNorm" | "advantageEps" | "maxStaleness" | "stalePolicy" | "staleBoundApplies"
  >,
  maxLength: number,
): PreparedBatch {
  const metrics: Record<string, number> = {
    "rollout/stale_dropped": 0,
    "rollout/stale_dropped_trajectories": 0,
    "rollout/importance_weighted": 0,
    "rollout/staleness_max": 0,
    "rollout/truncated": 0,
    /** Largest staleness among trained tokens the bound covers (≤ maxStaleness in drop mode). */
    "rollout/staleness_max_bounded": 0,
  };
  const masks: number[][] = [];
  const pastBound: number[][] = [];
  let stalenessSum = 0;
  let generated = 0;
  for (const t of trajectories) {
    const length = Math.min(t.tokenIds.length, maxLength);
    if (length < t.tokenIds.length) metrics["rollout/truncated"]! += 1;
    const mask = new Array<number>(length).fill(0);
    const flagged = new Array<number>(length).fill(0);
    let hadTokens = false;
    let kept = 0;
    for (let i = 0; i < length; i++) {
      if (t.lossMask[i] !== 1 || i === 0) continue; // position 0 has no log-prob (nothing precedes it)
      hadTokens = true;
      const staleness = tokenStaleness(currentVersion, t.policyVersion[i] as number);
      const bounded = trainer.staleBoundApplies === "all" || t.policyPool[i] === "current";
      if (bounded && staleness > trainer.maxStaleness) {
        if (trainer.stalePolicy === "drop") {
          metrics["rollout/stale_dropped"]! += 1;
          continue;
        }
        flagged[i] = 1;
        metrics["rollout/importance_weighted"]! += 1;
      }
      mask[i] = 1;
      kept += 1;
      generated += 1;
      stalenessSum += staleness;
      metrics["rollout/staleness_max"] = Math.max(metrics["rollout/staleness_max"]!, staleness);
      if (bounded)
        metrics["rollout/staleness_max_bounded"] = Math.max(metrics["rollout/staleness_max_bounded"]!, staleness);
      metrics[`staleness/${staleness}`] = (metrics[`staleness/${staleness}`] ?? 0) + 1;
    }
    if (hadTokens && kept === 0) metrics["rollout/stale_dropped_trajectories"]! += 1;
    masks.push(mask);
    pastBound.push(flagged);
  }
  metrics["rollout/staleness_mean"] = generated ? stalenessSum / generated : 0;

  const trajectoryAdvantages = computeAdvantages(
    trainer.estimator,
    {
      rewards: trajectories.map((t) => t.reward),
      groupIds: trajectories.map((t) => t.groupId),
      lossTokens: masks.map((m) => m.reduce((s, x) => s + x, 0)),
    },
    trainer.advantageEps,
  );
  let tokenAdvantages = broadcastToTokens(trajectoryAdvantages, masks);
  if (trainer.taskAdvantageNorm)
    tokenAdvantages = normalizeByTask(
      tokenAdvantages,
      masks,
      trajectories.map((t) => t.task),
      trainer.advantageEps,
    );

  const rows: BatchRow[] = [];
  trajectories.forEach((t, i) => {
    const mask = masks[i] as number[];
    if (!mask.some((m) => m === 1)) return;
    rows.push({
      trajectory: i,
      tokens: Int32Array.from(t.tokenIds.slice(0, mask.length)),
      lossMask: mask,
      oldLogp: t.logprobs.slice(0, mask.length),
      advantages: tokenAdvantages[i] as number[],
      pastBound: pastBound[i] as number[],
    });
  });
  return { rows, trajectoryAdvantages, tokens: generated, metrics };
}

/**
 * Decoupled PPO for importance-weighted tokens: their ratio is taken against the trainer's
 * pre-step log-probs (`proximal`), and their policy term is weighted by
 * min(exp(proximal - behaviour), cap). Other tokens keep weight 1 and the behaviour log-prob.
 */
export function importanceWeights(
  row: BatchRow,
  proximal: ArrayLike<number>,
  cap: number,
): { oldLogp: number[]; weights: number[] } {
  const oldLogp = row.oldLogp.slice();
  const weights = row.lossMask.map(() => 1);
  row.pastBound.forEach((flag, i) => {
    if (!flag) return;
    const prox = proximal[i] as number;
    weights[i] = Math.min(Math.exp(prox - (row.oldLogp[i] as number)), cap);
    oldLogp[i] = prox;
  });
  return { oldLogp, weights };
}

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
