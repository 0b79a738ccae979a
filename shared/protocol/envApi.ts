import { z } from "zod";
import { AssistantMessage, ChatMessage, ToolSpec } from "./openai.ts";

/**
 * Bodies of the AgentRL / AgentBench function-call environment protocol
 * (agentrl-reference.md section 2). Field names follow the wire format exactly
 * (snake_case where the reference uses it), so Python task workers and trainers interoperate.
 */

export const SampleStatus = z.enum([
  "running",
  "completed",
  "agent context limit",
  "agent validation failed",
  "agent invalid action",
  "task limit reached",
  "unknown",
  "task error",
  "cancelled",
]);
export type SampleStatus = z.infer<typeof SampleStatus>;

export const Metrics = z.record(z.string(), z.number());

/** Controller: POST /api/start_sample. */
export const ControllerStartSample = z.object({ name: z.string().min(1), index: z.number().int().nonnegative() });
/** Worker: POST /api/start_sample (the controller chooses the session id). */
export const WorkerStartSample = z.object({ index: z.number().int().nonnegative(), session_id: z.number().int() });

/** Answer to start_sample; the session id travels in the `session_id` response header. */
export const StartSampleResponse = z.object({
  messages: z.array(ChatMessage),
  tools: z.array(ToolSpec),
  status: SampleStatus,
  finish: z.boolean(),
  reward: z.number(),
  metric: Metrics.default({}),
});
export type StartSampleResponse = z.infer<typeof StartSampleResponse>;

/** Controller: POST /api/interact with header `session_id`. */
export const ControllerInteract = z.object({ messages: z.array(AssistantMessage).min(1) });
/** Worker: POST /api/interact. */
export const WorkerInteract = z.object({ session_id: z.number().int(), messages: z.array(AssistantMessage).min(1) });

/** Answer to interact: only the new (tool/user) messages. */
export const InteractResponse = z.object({
  messages: z.array(ChatMessage),
  finish: z.boolean(),
  reward: z.number(),
  status: SampleStatus,
  metrics: Metrics.default({}),
});
export type InteractResponse = z.infer<typeof InteractResponse>;

export const WorkerCancel = z.object({ session_id: z.number().int() });

/** POST /api/receive_heartbeat, sent by workers every few seconds. */
export const Heartbeat = z.object({
  name: z.string().min(1),
  address: z.string().url(),
  concurrency: z.number().int().positive(),
  indices: z.array(z.number().int().nonnegative()),
});
export type Heartbeat = z.infer<typeof Heartbeat>;

export const WorkerState = z.enum(["ALIVE", "COMA", "DEAD"]);
export type WorkerState = z.infer<typeof WorkerState>;
