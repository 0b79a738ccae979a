import { z } from "zod";

/**
 * Where a run's metrics go besides metrics.jsonl (which stays the source of truth). A tracker
 * never blocks or fails training: a write that fails is dropped, warned about once and counted
 * (`tracking/dropped` in metrics.jsonl).
 */
export const TrackingConfig = z
  .object({
    tensorboard: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe("write TensorBoard event files (every metric as a scalar per step)"),
        dir: z
          .string()
          .min(1)
          .optional()
          .describe("folder of the event files (default: <run folder>/tensorboard, beside metrics.jsonl)"),
      })
      .strict()
      .prefault({})
      .describe("TensorBoard: `tensorboard --logdir <run folder>/tensorboard`"),
  })
  .strict();
export type TrackingConfig = z.infer<typeof TrackingConfig>;
