import type { ExperimentConfig } from "../../shared/config/index.ts";
import type { Queue } from "../../shared/transport/types.ts";

/**
 * The staleness bound the feeder keeps (functions/feeder: queued requests + unconsumed
 * trajectories under max(rollout.maxInFlightBatches, trainer.warmupFactor) trainer batches of
 * groups), in trajectories. The gateway counts its unreleased sessions against the same budget,
 * so agents cannot push more experience into flight than the feeder's own rollouts may.
 */
export function inFlightTrajectoryCap(config: ExperimentConfig): number {
  const batches = Math.max(config.rollout.maxInFlightBatches, config.trainer.warmupFactor);
  return Math.ceil(batches * config.trainer.batchSize) * config.rollout.groupSize;
}

/** Depth of both pipeline queues, read at most once per `maxAgeMs` (each read is an API call on SQS). */
export class QueueDepth {
  private cached: { at: number; value: number } | undefined;
  constructor(
    private readonly queues: readonly Pick<Queue, "approximateDepth">[],
    private readonly maxAgeMs = 1_000,
  ) {}

  async outstanding(now: number): Promise<number> {
    if (this.cached && now - this.cached.at < this.maxAgeMs) return this.cached.value;
    const depths = await Promise.all(this.queues.map((q) => q.approximateDepth()));
    const value = depths.reduce((sum, d) => sum + d.visible + d.inFlight, 0);
    this.cached = { at: now, value };
    return value;
  }
}
