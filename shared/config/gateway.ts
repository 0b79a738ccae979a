import { z } from "zod";

/**
 * The gateway role (functions/gateway/): an OpenAI-compatible endpoint that records any agent's
 * calls as trajectories. Off unless `port` is set; `agentrl gateway` runs it on its own.
 */
export const GatewayConfig = z
  .object({
    port: z
      .number()
      .int()
      .min(0)
      .max(65_535)
      .optional()
      .describe("port of the gateway; set, `agentrl train` starts one (0 picks a free port)"),
    host: z.string().min(1).default("127.0.0.1").describe("interface the gateway listens on (0.0.0.0 in containers)"),
    publicUrl: z
      .string()
      .url()
      .optional()
      .describe("URL agents reach the gateway at, used in session baseUrls; @default the listening URL"),
    exclusive: z
      .boolean()
      .default(false)
      .describe("train only on gateway sessions: `agentrl train` starts no feeder and no rollout workers"),
    maxSessions: z.number().int().min(1).default(256).describe("open sessions at once; more answer 429"),
    maxCallsPerSession: z.number().int().min(1).default(64).describe("chat completions per session"),
    maxTokensPerSession: z
      .number()
      .int()
      .min(16)
      .default(16_384)
      .describe("prompt + generated tokens a session may record in all"),
    idleTimeoutSeconds: z
      .number()
      .positive()
      .default(300)
      .describe("a session idle this long is abandoned: counted, never trained"),
    groupTimeoutSeconds: z
      .number()
      .positive()
      .default(900)
      .describe("a group whose members have not all ended by then is released with the missing ones dropped"),
    baselineGroupSize: z
      .number()
      .int()
      .min(1)
      .default(4)
      .describe(
        "sessions without a groupId: this many ended sessions of one task form a group (their mean reward is the baseline)",
      ),
    retryAfterSeconds: z
      .number()
      .int()
      .min(1)
      .default(2)
      .describe("Retry-After of a session refused for the staleness bound or the session cap"),
  })
  .strict();
export type GatewayConfig = z.infer<typeof GatewayConfig>;
