/**
 * The sizing rule of an env pool, pure so it can be tested without processes: enough workers
 * for the sessions in use plus the demand that is waiting (queued rollout requests the rollout
 * workers can start, start_sample calls the controller answered 406), plus the warm pool, between
 * min and max.
 */
export interface Demand {
  /** Sessions open on ready (not draining) workers. */
  readonly inUse: number;
  /** Sessions wanted soon: this task's share of the rollout-requests queue depth. */
  readonly pending: number;
  /** start_sample calls answered 406 since the previous decision. */
  readonly rejected: number;
  /**
   * Sessions of this task the rollout workers can hold at once (its weight share of their
   * episode slots). Queued requests count only up to it: the rest wait in the queue for a free
   * rollout slot, not for an env worker. Unset: every queued request counts.
   */
  readonly startable?: number;
}

export interface Sizing {
  /** Sessions one worker serves (1 for exclusive sessions). */
  readonly slotsPerWorker: number;
  readonly minWorkers: number;
  readonly maxWorkers: number;
  /** Idle ready workers kept on top of what demand needs. */
  readonly warmWorkers: number;
}

/** Workers wanted now (ready + starting). */
export function desiredWorkers(demand: Demand, sizing: Sizing): number {
  const inUse = Math.max(0, demand.inUse);
  const queued = Math.max(0, demand.pending);
  const startableQueued =
    demand.startable === undefined ? queued : Math.min(queued, Math.max(0, demand.startable - inUse));
  const wanted = inUse + startableQueued + Math.max(0, demand.rejected);
  const busy = Math.ceil(wanted / sizing.slotsPerWorker);
  return Math.min(sizing.maxWorkers, Math.max(sizing.minWorkers, busy + sizing.warmWorkers));
}

/**
 * This task's share of a count over all tasks (the queued rollout requests, the rollout workers'
 * episode slots): the feeder draws tasks by their mix weights, so the share is the weight's
 * (rounded up, so one queued request of a rare task still counts).
 */
export function taskShare(count: number, taskWeight: number, totalWeight: number): number {
  if (!(count > 0) || !(taskWeight > 0) || !(totalWeight > 0)) return 0;
  return Math.ceil((count * taskWeight) / totalWeight);
}

/** p-th percentile (0..100) of `values` by nearest rank; undefined when empty. */
export function percentile(values: readonly number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank];
}
