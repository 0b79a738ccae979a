import { z } from "zod";
import { ENGINE_ID_PATTERN } from "../policy/engine-sync.ts";

export const ExternalPolicy = z
  .object({
    url: z.string().url().describe("OpenAI-compatible base URL, e.g. http://host:8000/v1"),
    model: z.string().describe("model name sent in requests"),
    probability: z.number().min(0).max(1).describe("per-turn probability of drawing this endpoint"),
  })
  .strict();

export const RolloutConfig = z
  .object({
    /** Samples per task instance (GRPO group size). */
    groupSize: z.number().int().min(2).default(8).describe("samples per task instance (GRPO n); at least 2"),
    maxTurns: z.number().int().min(1).default(20).describe("turn cap per episode"),
    maxTokensPerTurn: z.number().int().min(1).default(256).describe("new tokens per assistant turn (the paper: 1024)"),
    maxTotalTokens: z.number().int().min(16).default(2048).describe("token cap per trajectory (the paper: 8192)"),
    temperature: z.number().min(0).max(2).default(0.8).describe("sampling temperature"),
    topP: z.number().gt(0).max(1).default(1).describe("nucleus sampling"),
    /**
     * Which log-prob is recorded as each token's behaviour log-prob (the denominator of the PPO
     * importance ratio). `sampled`: under the distribution the token was drawn from — with top_p
     * < 1 the nucleus renormalized — so the ratio is exact. `full`: the full-vocabulary
     * log_softmax(logits / T), which the trainer recomputes; with top_p < 1 it understates every
     * sampled token's probability and biases the ratio upwards. Either way the trajectory keeps the
     * full log-probs too, for the rollout/trainer agreement check.
     */
    behaviorLogprobs: z
      .enum(["sampled", "full"])
      .default("sampled")
      .describe("behaviour log-prob of the importance ratio: of the sampled (truncated) or the full distribution"),
    /** Reward given to any episode whose final status is not `completed`. */
    incompletePunishment: z.number().default(-0.2).describe("reward of non-completed episodes"),
    /** Retries of infrastructure failures, each with a fresh session. */
    maxAttempts: z.number().int().min(1).default(10).describe("infrastructure retries per request"),
    /** Retry pause after an infrastructure failure, doubled per attempt (capped at 30 s). */
    retryBackoffMs: z.number().int().min(0).default(500).describe("first pause before an infrastructure retry (ms)"),
    /** Wall-clock cap of one episode; past it the session is cancelled and the attempt counts as an infrastructure failure. */
    episodeTimeoutSeconds: z.number().positive().default(600).describe("episode wall-clock limit (s)"),
    /** Per chat-completions request to a policy server. */
    policyTimeoutSeconds: z.number().positive().default(300).describe("policy request timeout (s)"),
    /**
     * Backpressure: the feeder keeps queued requests plus unconsumed trajectories under this many
     * trainer batches (the paper caps queue and buffer at ~2 batches). Never below trainer.warmupFactor.
     */
    maxInFlightBatches: z.number().min(1).default(2).describe("batches in flight (requests + trajectories)"),
    workers: z.number().int().min(1).default(2).describe("rollout worker processes"),
    concurrency: z.number().int().min(1).default(16).describe("episodes in flight per rollout worker"),
    /**
     * Where the current pool's policy version comes from. `response`: the answer itself (our
     * servers' per-token trace; in the vLLM dialect the x-policy-version header or a `-v<N>`
     * model name). `sync`: the sync record the trainer keeps for the engine named by
     * `rollout.syncEngine` (engines/<id>.json, written around each reload of `policy.syncEngines`);
     * an answer counts only when the record read before sending and after the answer says `ready`
     * with the same seq, otherwise it is discarded and asked again. For vLLM, which reports no version.
     */
    versionSource: z
      .enum(["response", "sync"])
      .default("response")
      .describe("current pool's version: from the answer, or from the synced engine's record (vLLM)"),
    /** `versionSource: sync`: the `policy.syncEngines[].id` of the engine behind the current pool's URL. */
    syncEngine: z
      .string()
      .regex(ENGINE_ID_PATTERN, "lowercase letters, digits and '-', at most 63 characters")
      .optional()
      .describe("versionSource sync: policy.syncEngines[].id of the current pool's engine"),
    /** `versionSource: sync`: answers discarded for a reload in one turn before the turn counts as an infrastructure failure. */
    syncRetries: z
      .number()
      .int()
      .min(0)
      .max(100)
      .default(3)
      .describe("versionSource sync: re-asks per turn after an answer straddled a reload"),
    crossPolicy: z
      .object({
        enabled: z.boolean().default(true).describe("per-turn policy drawn from the pool"),
        staleProbability: z.number().min(0).max(1).default(0.25).describe("per-turn probability of the stale pool"),
        staleEvery: z.number().int().min(1).default(25).describe("the stale pool takes every K-th version"),
        external: z.array(ExternalPolicy).default([]).describe("extra OpenAI-compatible pool members"),
      })
      .strict()
      .prefault({}),
  })
  .strict()
  .superRefine((r, ctx) => {
    if (r.versionSource === "sync" && r.syncEngine === undefined)
      ctx.addIssue({
        code: "custom",
        path: ["syncEngine"],
        message: 'versionSource "sync" reads engines/<id>.json: name the engine (a policy.syncEngines[].id)',
      });
  });
export type RolloutConfig = z.infer<typeof RolloutConfig>;
