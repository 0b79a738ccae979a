import { z } from "zod";

/** Limits of every HTTP server of the pipeline (controller, env workers, policy servers). */
export const HttpLimitsConfig = z
  .object({
    bodyLimitBytes: z
      .number()
      .int()
      .min(1024)
      .max(64 * 1024 * 1024)
      .default(8 * 1024 * 1024)
      .describe("largest request body; larger ones answer 413 before the body is read in full"),
    headersTimeoutMs: z
      .number()
      .int()
      .min(100)
      .default(10_000)
      .describe("time a client may take to send the request headers (slowloris guard)"),
    requestTimeoutMs: z
      .number()
      .int()
      .min(100)
      .default(60_000)
      .describe("time a client may take to send the whole request (not the answer)"),
    maxConnections: z.number().int().min(1).default(1024).describe("open connections per server; more are refused"),
  })
  .strict();
export type HttpLimitsConfig = z.infer<typeof HttpLimitsConfig>;

/** Limits of a policy server's chat-completions endpoint. */
export const PolicyLimitsConfig = z
  .object({
    maxQueuedSequences: z
      .number()
      .int()
      .min(1)
      .default(256)
      .describe("sequences waiting for a decoder slot; past it requests answer 429 with Retry-After"),
    requestDeadlineSeconds: z
      .number()
      .positive()
      .default(300)
      .describe("wall-clock limit of one chat-completions request; past it the request answers 504"),
  })
  .strict();
export type PolicyLimitsConfig = z.infer<typeof PolicyLimitsConfig>;

/** Limits an env worker applies to each agent turn. */
export const EnvLimitsConfig = z
  .object({
    maxToolCallsPerTurn: z
      .number()
      .int()
      .min(1)
      .max(1024)
      .default(8)
      .describe("tool calls in one agent turn; a turn with more runs none of them (agent invalid action)"),
    maxEchoChars: z
      .number()
      .int()
      .min(16)
      .max(100_000)
      .default(200)
      .describe(
        "characters of an unknown tool name or invalid arguments echoed back to the agent; the rest is counted",
      ),
  })
  .strict();
export type EnvLimitsConfig = z.infer<typeof EnvLimitsConfig>;

/** `limits`: every resource cap a caller can hit, in one place (docs/security.md). */
export const LimitsConfig = z
  .object({
    http: HttpLimitsConfig.prefault({}),
    policy: PolicyLimitsConfig.prefault({}),
    env: EnvLimitsConfig.prefault({}),
  })
  .strict();
export type LimitsConfig = z.infer<typeof LimitsConfig>;
