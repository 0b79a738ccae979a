import { z } from "zod";

/**
 * One line of a run's metrics.jsonl, written by the trainer after every step. Metric names are
 * namespaced (`loss/policy`, `policy/clip_frac`, `rollout/stale_dropped`, `task/<name>/success`,
 * `staleness/<k>` = tokens that were k versions old, `throughput/trajectories_per_s`).
 */
export const StepMetrics = z.object({
  schemaVersion: z.literal(1),
  experimentId: z.string(),
  step: z.number().int().nonnegative(),
  /** Policy version published by this step. */
  version: z.number().int().nonnegative(),
  time: z.string(),
  elapsedSeconds: z.number().nonnegative(),
  metrics: z.record(z.string(), z.number()),
});
export type StepMetrics = z.infer<typeof StepMetrics>;

/** Per-task success table of one policy on one split (`agentrl eval`). */
export const EvalReport = z.object({
  schemaVersion: z.literal(1),
  policy: z.string(),
  split: z.enum(["train", "test"]),
  createdAt: z.string(),
  tasks: z.array(
    z.object({
      task: z.string(),
      episodes: z.number().int().nonnegative(),
      success: z.number().min(0).max(1),
      meanReward: z.number(),
      meanTurns: z.number().nonnegative(),
      statuses: z.record(z.string(), z.number().int().nonnegative()),
      /** Success per instance kind (DBBench's question types), for tasks whose instances have kinds. */
      categories: z
        .record(z.string(), z.object({ episodes: z.number().int().positive(), success: z.number().min(0).max(1) }))
        .optional(),
      /** Episodes per instance when more than one (`agentrl eval --samples K`). */
      samples: z.number().int().min(2).optional(),
      /** Mean over instances of the best sample's success (pass@K for binary tasks). */
      passAtK: z.number().min(0).max(1).optional(),
      /** Share of instances whose samples' successes differ: the groups GRPO learns from. */
      mixedShare: z.number().min(0).max(1).optional(),
    }),
  ),
  /** Unweighted mean of the per-task success rates (as the reference's "avg" column). */
  averageSuccess: z.number().min(0).max(1),
  /**
   * Every episode's outcome, ordered by task, instance and sample: two reports on the same
   * instances can then be compared pair by pair (reports written before it have none).
   */
  outcomes: z
    .array(
      z.object({
        task: z.string(),
        index: z.number().int().nonnegative(),
        sample: z.number().int().nonnegative(),
        status: z.string(),
        success: z.number().min(0).max(1),
      }),
    )
    .optional(),
});
export type EvalReport = z.infer<typeof EvalReport>;
