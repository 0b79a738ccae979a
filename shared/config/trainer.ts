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
    /**
     * How the policy term averages over a step's tokens. `token-mean` (the reference's): every
     * trained token counts the same, so a long trajectory weighs in proportion to its length;
     * `seq-mean-token-mean`: each trajectory's tokens are averaged first, then the trajectories,
     * so a long failing episode weighs no more than a short success. The KL term stays a token-mean.
     */
    lossReduction: z
      .enum(["token-mean", "seq-mean-token-mean"])
      .default("token-mean")
      .describe("policy-term average: over tokens, or per trajectory then over trajectories"),
    /**
     * Weight of the policy term on tokens whose advantage is negative: 1 is the plain policy
     * gradient; 0 learns only from what did better than its baseline (pushes nothing down, so
     * probability is not spread onto tokens no trajectory chose); in between damps the push-down.
     */
    negativeAdvantageWeight: z
      .number()
      .min(0)
      .max(1)
      .default(1)
      .describe("policy-term weight of negative-advantage tokens (0: better-than-baseline tokens only)"),
    /**
     * Question-renamed copies of each trajectory with a non-zero advantage, trained with that
     * advantage (trainer-image/trainer/renamed.ts): the question's words its actions copy are
     * renamed to fresh words throughout, so the reward pays for copying a word rather than for the
     * word itself. 0 trains the sampled trajectories alone.
     */
    renamedVariants: z
      .number()
      .int()
      .min(0)
      .max(8)
      .default(0)
      .describe("question-renamed copies of each trajectory trained with its advantage (0: none)"),
    advantageEps: z.number().positive().default(1e-6).describe("epsilon in advantage normalization"),
    /**
     * Expert demonstrations beside the RL loss (InstructGPT's PPO-ptx, expert traces in place of
     * pretraining data): each step also raises the log-likelihood of `perStep` successful expert
     * episodes of the training split, weighted `coef` against the policy term, so what the warm-up
     * taught has a pull of its own while RL learns from rewards. Collected once at start by the
     * `agentrl trainer` command from the mix's task experts (seeded by the experiment's seed).
     */
    demonstrations: z
      .object({
        coef: z
          .number()
          .min(0)
          .default(0)
          .describe("weight of the demonstrations' NLL (per token) in the loss; 0 disables"),
        perStep: z.number().int().min(1).max(256).default(8).describe("expert episodes in each step's loss"),
        episodesPerTask: z
          .number()
          .int()
          .min(1)
          .max(10_000)
          .default(400)
          .describe("expert episodes collected per task at start (train split)"),
        /**
         * The control for what RL adds beside the demonstrations: the same run (same rollouts, same
         * per-step demonstrations, same optimizer) with the RL loss left out of the gradient, so the
         * step trains on the demonstrations alone (`npm run learning` runs it beside Table 3).
         */
        alone: z
          .boolean()
          .default(false)
          .describe("leave the RL loss out: each step trains on the demonstrations alone (needs coef > 0)"),
      })
      .strict()
      .refine((d) => !d.alone || d.coef > 0, {
        path: ["alone"],
        message: "trains on the demonstrations alone, so needs trainer.demonstrations.coef above 0",
      })
      .prefault({}),
    /**
     * Versions a generated token may lag the trainer's weights (every optimizer step is a
     * version). The bound covers every token, the stale pool's of cross-policy sampling too;
     * tokens past it are handled by `stalePolicy`.
     */
    maxStaleness: z.number().int().min(0).default(4).describe("staleness bound in policy versions, for every token"),
    /**
     * Past the bound: `importance-weight` trains the token with the decoupled PPO objective (ratio
     * against the trainer's pre-step log-probs) weighted by min(exp(pre-step − behaviour),
     * importanceWeightCap) — so the stale pool of cross-policy sampling, old on purpose, still
     * teaches with a bounded weight; `drop` leaves the token out of the loss (counted).
     */
    stalePolicy: z
      .enum(["drop", "importance-weight"])
      .default("importance-weight")
      .describe("tokens past the bound: capped importance weight or dropped"),
    importanceWeightCap: z.number().positive().default(2).describe("cap of the behaviour importance weight"),
    /** An incomplete group older than this (a member dead-lettered) is dropped, counted and acknowledged. */
    groupTimeoutSeconds: z.number().positive().default(900).describe("wait for a group's last member (s)"),
    microBatchTokens: z.number().int().min(64).default(4096).describe("tokens per gradient micro-batch"),
    warmupFactor: z.number().min(1).default(1.7).describe("first step waits for this many batches"),
    /** Store Adam moments with each version (optimizer.safetensors, ~2x the weights) so a resume continues exactly. */
    saveOptimizerState: z.boolean().default(true).describe("checkpoint the Adam moments too"),
    /**
     * Every optimizer step makes a new version (version = base version + steps), so a version
     * always names the weights that produced a token; only every N-th (and the last) is
     * published to the checkpoint store and served (the stale pool rounds its every-K-th
     * version down to a published one).
     */
    checkpointEvery: z.number().int().min(1).default(1).describe("publish every N-th version"),
    /**
     * Rollout/trainer agreement alarm: `policy/logp_gap_fresh` (mean |trainer − behaviour|
     * full-vocabulary log-prob over tokens of the trainer's own weights) above this logs a
     * warning naming the worst trajectory and marks the step in the report. A gap means the
     * served model and the trained one differ (tokenization, numerics, a wrong version label).
     */
    logpGapAlarm: z.number().positive().default(1e-2).describe("warn when policy/logp_gap_fresh exceeds this (nats)"),
    stopOnLogpGap: z.boolean().default(false).describe("stop the run when the log-prob gap alarm fires"),
    /**
     * Threads each optimizer step is spread over (data parallel: each computes the gradient of a
     * share of the batch's rows, all apply the same summed Adam step). TF.js's wasm backend uses
     * one core per thread, so 2 uses a second core; results equal one thread's within float
     * rounding. Sync mode only: in async mode generation needs the other core.
     */
    dataParallel: z
      .number()
      .int()
      .min(1)
      .max(2)
      .default(1)
      .describe("training threads (data parallel); 2 needs mode sync"),
  })
  .strict()
  .superRefine((t, ctx) => {
    if (t.clipLow >= 1) ctx.addIssue({ code: "custom", path: ["clipLow"], message: "must be below 1" });
    if (t.dataParallel > 1 && t.mode !== "sync")
      ctx.addIssue({
        code: "custom",
        path: ["dataParallel"],
        message: `${t.dataParallel} needs trainer.mode "sync" (mode is "${t.mode}"): in async mode generation runs beside training and needs the other core; set trainer.mode: sync or trainer.dataParallel: 1`,
      });
    if (t.skipUniformGroups && t.estimator === "reinforce++")
      ctx.addIssue({
        code: "custom",
        path: ["skipUniformGroups"],
        message:
          "needs a group baseline (estimator grpo or rloo): under reinforce++ a uniform group still has an advantage",
      });
  });
export type TrainerConfig = z.infer<typeof TrainerConfig>;
