import { z } from "zod";
import { assertValidObjectKey, assertValidPrefix } from "../transport/validate.ts";
import { SampleStatus } from "./envApi.ts";
import { ChatMessage, ToolSpec } from "./openai.ts";

/**
 * Events and stored objects of the pipeline. Each carries a `schemaVersion` literal so a reader
 * meeting a newer producer fails loudly instead of misreading. Events are small (claim-check):
 * big payloads live in the object store and events carry their keys.
 */

/**
 * Ids become object-key segments (`trajectories/<experimentId>/<groupId>/<trajectoryId>.json`),
 * so they are single safe segments: no '/', no '..', nothing a store could read as a path.
 */
const id = z
  .string()
  .min(1)
  .max(256)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:=+@-]*$/, "letters, digits and . _ : = + @ - only, starting with a letter or digit");

/** A key in an object store, checked as the stores check it (a bad key is a bad message, not a crash). */
export const ObjectKey = z.string().superRefine((key, ctx) => {
  try {
    assertValidObjectKey(key);
  } catch (error) {
    ctx.addIssue({ code: "custom", message: (error as Error).message });
  }
});

/** A key prefix (`policies/v3/`), checked as the stores check prefixes. */
const ObjectPrefix = z
  .string()
  .min(1)
  .superRefine((prefix, ctx) => {
    try {
      assertValidPrefix(prefix);
    } catch (error) {
      ctx.addIssue({ code: "custom", message: (error as Error).message });
    }
  });

/** feeder -> rollout-requests queue -> rollout worker */
export const RolloutRequest = z.object({
  schemaVersion: z.literal(1),
  experimentId: id,
  task: z.string().min(1),
  index: z.number().int().nonnegative(),
  split: z.enum(["train", "test"]).default("train"),
  /** All `groupSize` samples of one task instance share a groupId (one GRPO group). */
  groupId: id,
  sample: z.number().int().nonnegative(),
  groupSize: z.number().int().positive(),
  /** Infrastructure retries made so far (never counted as agent failures). */
  attempt: z.number().int().nonnegative().default(0),
  /**
   * Sync mode: the newest published version the batch was fed for. Our policy servers answer with
   * their pool's version for it (current: this one; stale: its last K-th), waiting for it if they
   * have not loaded it yet, so which weights act never depends on timing.
   */
  policyVersion: z.number().int().nonnegative().optional(),
});
export type RolloutRequest = z.infer<typeof RolloutRequest>;

/**
 * A finished episode as the trainer consumes it. Token-aligned arrays all have length
 * `tokenIds.length`; `policyVersion`/`policyPool` are -1/null on prompt and observation tokens.
 */
export const Trajectory = z
  .object({
    schemaVersion: z.literal(1),
    trajectoryId: id,
    experimentId: id,
    groupId: id,
    task: z.string().min(1),
    index: z.number().int().nonnegative(),
    sample: z.number().int().nonnegative(),
    groupSize: z.number().int().positive(),
    messages: z.array(ChatMessage),
    tools: z.array(ToolSpec),
    tokenIds: z.array(z.number().int().nonnegative()),
    lossMask: z.array(z.union([z.literal(0), z.literal(1)])),
    /** Behaviour (rollout-time) log-prob of each generated token, as `behaviorLogprobs` says; 0 where lossMask is 0. */
    logprobs: z.array(z.number()),
    /** What `logprobs` holds: of the distribution sampled from (top_p's nucleus) or of the full vocabulary. */
    behaviorLogprobs: z.enum(["sampled", "full"]).default("full"),
    /**
     * Full-vocabulary log-probs (what the trainer recomputes), when they differ from `logprobs`'s
     * kind; the rollout/trainer agreement check compares against these.
     */
    fullLogprobs: z.array(z.number()).optional(),
    policyVersion: z.array(z.number().int().min(-1)),
    policyPool: z.array(z.string().nullable()),
    /** Final reward after the incomplete-episode punishment. */
    reward: z.number(),
    /** The environment's own reward, before punishment. */
    envReward: z.number(),
    status: SampleStatus,
    turns: z.number().int().nonnegative(),
    metrics: z.record(z.string(), z.number()).default({}),
    timings: z.object({
      startedAt: z.string(),
      finishedAt: z.string(),
      envMs: z.number().nonnegative(),
      policyMs: z.number().nonnegative(),
    }),
    envWorker: z.string().optional(),
    attempt: z.number().int().nonnegative().default(0),
    /**
     * A trajectory the gateway recorded from an agent's own calls: one entry per chat completion,
     * with token offsets (its prompt ends at `promptEnd`, its completion at `end`), for the viewer.
     */
    gatewayCalls: z
      .array(
        z.object({
          completionId: z.string(),
          promptEnd: z.number().int().nonnegative(),
          end: z.number().int().nonnegative(),
          pool: z.string(),
          policyVersion: z.number().int().min(-1),
          toolCalls: z.array(z.string()),
          drift: z.boolean(),
        }),
      )
      .optional(),
  })
  .superRefine((t, ctx) => {
    const n = t.tokenIds.length;
    for (const key of ["lossMask", "logprobs", "policyVersion", "policyPool", "fullLogprobs"] as const) {
      const values = t[key];
      if (values !== undefined && values.length !== n) {
        ctx.addIssue({ code: "custom", path: [key], message: `length ${values.length} differs from tokenIds (${n})` });
      }
    }
  });
export type Trajectory = z.infer<typeof Trajectory>;

/** rollout worker -> trajectories queue -> trainer (the trajectory itself sits at `key`). */
export const TrajectoryReady = z.object({
  schemaVersion: z.literal(1),
  trajectoryId: id,
  experimentId: id,
  groupId: id,
  groupSize: z.number().int().positive(),
  task: z.string().min(1),
  key: ObjectKey,
  tokens: z.number().int().nonnegative(),
  reward: z.number(),
  status: SampleStatus,
  /** Oldest and newest policy version among the generated tokens (-1 when none was generated). */
  minVersion: z.number().int().min(-1),
  maxVersion: z.number().int().min(-1),
});
export type TrajectoryReady = z.infer<typeof TrajectoryReady>;

/**
 * rollout worker -> trajectories queue -> trainer, instead of a TrajectoryReady: every attempt at
 * this group member failed for reasons outside the agent (environment or infrastructure), so it
 * has no trajectory. The trainer completes the group without it and counts it per task.
 */
export const MemberDropped = z.object({
  schemaVersion: z.literal(1),
  kind: z.literal("member-dropped"),
  trajectoryId: id,
  experimentId: id,
  groupId: id,
  groupSize: z.number().int().positive(),
  task: z.string().min(1),
  attempts: z.number().int().positive(),
  /** The last failure, for the logs (capped). */
  reason: z.string().max(2000),
});
export type MemberDropped = z.infer<typeof MemberDropped>;

/** What the trajectories queue carries: a stored trajectory's event, or a member that has none. */
export const TrajectoryEvent = z.union([MemberDropped, TrajectoryReady]);
export type TrajectoryEvent = z.infer<typeof TrajectoryEvent>;

/** trainer -> policy-events queue (and the checkpoint store's newest manifest) */
export const PolicyPublished = z.object({
  schemaVersion: z.literal(1),
  experimentId: id,
  version: z.number().int().nonnegative(),
  /** The version's folder, `policies/vN/`. */
  key: ObjectPrefix,
  step: z.number().int().nonnegative(),
  createdAt: z.string(),
});
export type PolicyPublished = z.infer<typeof PolicyPublished>;
