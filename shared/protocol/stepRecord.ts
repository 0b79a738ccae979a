import { z } from "zod";

/**
 * What the trainer made of each trajectory in one step (one object per step in the trajectories
 * store, at `stepRecordKey`): advantages before and after task normalization, per-token trainer
 * log-probs, ratios and clip flags, and the losses. `agentrl view` joins it with the trajectories.
 *
 * Token arrays are compact: only trained tokens (loss mask after the staleness bound) are listed,
 * in order, at the positions given by `spans` (half-open [start, end) ranges of token indices);
 * a token the rollout generated but no span covers was dropped by the staleness bound.
 */

/** Prefix of step records in the trajectories store. */
export const STEP_RECORD_PREFIX = "steps/";

/** `steps/<experimentId>/step-000042.json`: sorts by step in a store listing. */
export function stepRecordKey(experimentId: string, step: number): string {
  return `${STEP_RECORD_PREFIX}${experimentId}/step-${String(step).padStart(6, "0")}.json`;
}

/** Why a delivered trajectory added nothing to a step's loss. */
export const DropReason = z.enum([
  /** Its group did not complete within trainer.groupTimeoutSeconds (a member was dead-lettered). */
  "group abandoned",
  /** Its object was missing or failed validation when the step loaded it. */
  "missing or invalid",
  /** Every reward of its group was equal (trainer.skipUniformGroups): zero advantage. */
  "uniform group skipped",
  /** Every generated token was past trainer.maxStaleness (stalePolicy: drop). */
  "all tokens stale",
  /** It had no generated token inside the model's context. */
  "no trained tokens",
]);
export type DropReason = z.infer<typeof DropReason>;

const span = z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative()]);

/** A trajectory the step trained on (or loaded and then left out, with `dropped`). */
export const StepTrajectory = z
  .object({
    trajectoryId: z.string().min(1),
    groupId: z.string().min(1),
    task: z.string().min(1),
    reward: z.number(),
    /** Estimator advantage (GRPO/RLOO/REINFORCE++), before task normalization. */
    advantage: z.number(),
    /** Advantage on its trained tokens after task normalization (= advantage when it is off); null when nothing was trained. */
    normalizedAdvantage: z.number().nullable(),
    dropped: DropReason.optional(),
    /** Its share of the step's policy loss: sum of its weighted token losses / the step's trained tokens. */
    policyLoss: z.number(),
    /** Trained tokens whose ratio lies outside [1 - clipLow, 1 + clipHigh]. */
    clippedTokens: z.number().int().nonnegative(),
    spans: z.array(span),
    /** Trainer log-prob of each trained token under the weights before this step's update. */
    newLogp: z.array(z.number()),
    /** exp(newLogp - oldLogp), oldLogp being the behaviour log-prob (the pre-step one on importance-weighted tokens). */
    ratio: z.array(z.number()),
    /** Token indices (into the trajectory) whose ratio was clipped. */
    clippedAt: z.array(z.number().int().nonnegative()),
    /** Token indices kept past the staleness bound with importance weighting (stalePolicy: importance). */
    importanceWeightedAt: z.array(z.number().int().nonnegative()).default([]),
  })
  .superRefine((t, ctx) => {
    const n = t.spans.reduce((s, [a, b]) => s + Math.max(0, b - a), 0);
    for (const key of ["newLogp", "ratio"] as const)
      if (t[key].length !== n)
        ctx.addIssue({ code: "custom", path: [key], message: `length ${t[key].length} differs from the spans' ${n}` });
  });
export type StepTrajectory = z.infer<typeof StepTrajectory>;

export const StepRecord = z.object({
  schemaVersion: z.literal(1),
  experimentId: z.string().min(1),
  step: z.number().int().positive(),
  /** Policy version of the weights this step trained (behaviour staleness is measured against it). */
  trainedVersion: z.number().int().nonnegative(),
  createdAt: z.string(),
  params: z.object({
    estimator: z.string(),
    taskAdvantageNorm: z.boolean(),
    clipLow: z.number(),
    clipHigh: z.number(),
    dualClip: z.number(),
    klCoef: z.number(),
  }),
  losses: z.object({
    total: z.number(),
    policy: z.number(),
    kl: z.number(),
    clipFrac: z.number(),
    gradNorm: z.number(),
    /** 1 when a non-finite gradient left the weights unchanged. */
    skipped: z.number(),
  }),
  /** Trained tokens of the step (the token-mean denominator). */
  tokens: z.number().int().nonnegative(),
  trajectories: z.array(StepTrajectory),
  /** Delivered trajectories the step consumed without loading them (abandoned groups, missing objects). */
  unloaded: z.array(z.object({ trajectoryId: z.string().min(1), groupId: z.string().min(1), dropped: DropReason })),
  /** Seconds spent copying log-probs out of the loss and building this record (writing it is in the metrics line's `time/step_record_seconds`). */
  buildSeconds: z.number().nonnegative(),
});
export type StepRecord = z.infer<typeof StepRecord>;
