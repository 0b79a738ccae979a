import { z } from "zod";

/**
 * The closing evaluation of `agentrl train` / `npm start`: the base and the newest policy on the
 * first `instances` held-out instances of each task. Greedy by default; `temperature`, `topP` and
 * `samples` evaluate the policy the way RL samples it (pass@1 averaged over the samples, plus
 * pass@k), as reasoning-RL papers report pass@1 from k samples at their sampling settings.
 */
export const EvaluationConfig = z
  .object({
    instances: z
      .number()
      .int()
      .nonnegative()
      .default(20)
      .describe("held-out instances per task in the closing evaluation (0 skips it)"),
    temperature: z
      .number()
      .min(0)
      .max(2)
      .default(0)
      .describe("sampling temperature of the closing evaluation (0: greedy)"),
    topP: z.number().gt(0).max(1).default(1).describe("nucleus sampling of a sampled closing evaluation"),
    samples: z
      .number()
      .int()
      .min(1)
      .max(64)
      .default(1)
      .describe("episodes per instance; above 1 adds pass@k and needs temperature > 0"),
  })
  .strict()
  .superRefine((e, ctx) => {
    if (e.samples > 1 && e.temperature === 0)
      ctx.addIssue({
        code: "custom",
        path: ["samples"],
        message: "more than one sample per instance needs temperature > 0 (greedy repeats itself)",
      });
    if (e.topP < 1 && e.temperature === 0)
      ctx.addIssue({
        code: "custom",
        path: ["topP"],
        message: "nucleus sampling needs temperature > 0 (greedy decoding ignores it)",
      });
  });
export type EvaluationConfig = z.infer<typeof EvaluationConfig>;
