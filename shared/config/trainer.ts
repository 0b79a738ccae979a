import { z } from "zod";

export const TrainerConfig = z
  .object({
    mode: z.enum(["async", "sync"]).default("async").describe("async pipeline or generate-then-train"),
    /** Task instances per step; a step consumes batchSize * groupSize trajectories at least. */
    batchSize: z.number().int().min(1).default(8).describe("task instances (groups) per step"),
    maxSteps: z.number().int().min(1).default(20).describe("optimizer steps to run"),
    learningRate: z.number().positive().default(1e-4).describe("Adam learning rate"),
    adamBeta1: z.number().min(0).lt(1).default(0.9).describe("Adam first-moment decay"),
    adamBeta2: z.number().min(0).lt(1).default(0.999).describe("Adam second-moment decay"),
    gradClip: z.number().positive().default(1).describe("global gradient-norm clip"),
    estimator: z.enum(["grpo", "rloo", "reinforce++"]).default("grpo").describe("advantage estimator"),
    taskAdvantageNorm: z.boolean().default(true).describe("second, per-task advantage normalization"),
    /**
     * DAPO's dynamic-sampling filter: a group whose members all got the same reward has zero
     * advantage under a group baseline, so it is left out of the step entirely (no forward or
     * backward pass, not in the token-mean or in task normalization). The step then averages over
     * the groups that carry signal, and the trainer spends its time on them. Still consumed and
     * counted (`rollout/groups_uniform`). Needs a group baseline (grpo or rloo).
     */
    skipUniformGroups: z.boolean().default(false).describe("leave groups with one reward for all out of the step"),
    clipLow: z.number().min(0).max(1).default(0.2).describe("PPO clip below 1"),
    clipHigh: z.number().min(0).default(0.2).describe("PPO clip above 1"),
    dualClip: z.number().gt(1).default(3).describe("dual-clip constant c for negative advantages"),
    klCoef: z.number().min(0).default(1e-4).describe("KL-to-reference coefficient; 0 disables the reference"),
    advantageEps: z.number().positive().default(1e-6).describe("epsilon in advantage normalization"),
    /** Versions a token may lag the trainer's policy; tokens older than this are handled by `stalePolicy`. */
    maxStaleness: z.number().int().min(0).default(4).describe("staleness bound in policy versions"),
    stalePolicy: z.enum(["drop", "importance-weight"]).default("drop").describe("what to do past the bound"),
    /**
     * importance-weight only: tokens past the bound use the decoupled PPO objective (ratio against
     * the trainer's pre-step log-probs) weighted by min(exp(pre-step - behaviour), cap).
     */
    /**
     * Which tokens the bound applies to. `current`: tokens of the current pool only — the stale
     * pool of cross-policy sampling is old on purpose (every staleEvery versions) and its tokens
     * train through the PPO ratio against their own log-probs. `all`: every generated token.
     */
    staleBoundApplies: z.enum(["current", "all"]).default("current").describe("pools the staleness bound covers"),
    importanceWeightCap: z.number().positive().default(2).describe("cap of the behaviour importance weight"),
    /** An incomplete group older than this (a member dead-lettered) is dropped, counted and acknowledged. */
    groupTimeoutSeconds: z.number().positive().default(900).describe("wait for a group's last member (s)"),
    microBatchTokens: z.number().int().min(64).default(4096).describe("tokens per gradient micro-batch"),
    warmupFactor: z.number().min(1).default(1.7).describe("first step waits for this many batches"),
    /** Store Adam moments with each version (optimizer.safetensors, ~2x the weights) so a resume continues exactly. */
    saveOptimizerState: z.boolean().default(true).describe("checkpoint the Adam moments too"),
    checkpointEvery: z.number().int().min(1).default(1).describe("publish a version every N steps"),
  })
  .strict()
  .superRefine((t, ctx) => {
    if (t.clipLow >= 1) ctx.addIssue({ code: "custom", path: ["clipLow"], message: "must be below 1" });
    if (t.skipUniformGroups && t.estimator === "reinforce++")
      ctx.addIssue({
        code: "custom",
        path: ["skipUniformGroups"],
        message:
          "needs a group baseline (estimator grpo or rloo): under reinforce++ a uniform group still has an advantage",
      });
  });
export type TrainerConfig = z.infer<typeof TrainerConfig>;
