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
  /** Where the controller calls the worker back; http(s) only. */
  address: z.url({ protocol: /^https?$/, error: "must be an http(s) URL" }),
  concurrency: z.number().int().positive(),
  indices: z.array(z.number().int().nonnegative()),
  /** The worker takes no new session (retiring after its episode or age limit, or drained by its pool). */
  draining: z.boolean().optional(),
  /** Sessions this worker has started since it came up (reuse limits count these). */
  episodes: z.number().int().nonnegative().optional(),
  /** When the worker came up, in seconds since the epoch. */
  started_at: z.number().nonnegative().optional(),
});
export type Heartbeat = z.infer<typeof Heartbeat>;

export const WorkerState = z.enum(["ALIVE", "COMA", "DEAD"]);
export type WorkerState = z.infer<typeof WorkerState>;

/**
 * Header that carries the session id: set by the controller on the start_sample answer, sent by
 * the trainer on interact and cancel. HTTP header names are case-insensitive (Go's controller
 * writes `Session_id`); Node lowercases them, so this spelling matches both.
 */
export const SESSION_ID_HEADER = "session_id";

/** A session id as it travels in the `session_id` header (decimal text of a non-negative integer). */
export const SessionIdHeader = z
  .string({ error: "missing header session_id" })
  .regex(/^\d+$/, "session_id must be a non-negative integer")
  .transform((text) => Number(text))
  .pipe(z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER));

/** Controller: POST /api/cancel; AgentRL sends the id in the header, AgentBench v0.2 in the body. */
export const ControllerCancel = z.object({ session_id: z.number().int().nonnegative().optional() });

/** POST /api/calculate_overall (controller: `name` picks the task; a worker ignores it). */
export const CalculateOverall = z.object({
  name: z.string().min(1).optional(),
  results: z.array(
    z.looseObject({
      status: SampleStatus.optional(),
      reward: z.number().optional(),
      metrics: Metrics.optional(),
    }),
  ),
});
export type CalculateOverall = z.infer<typeof CalculateOverall>;

/** Answer of calculate_overall: aggregate success and reward over finished samples. */
export const OverallResult = z.object({
  total: z.number().int(),
  success_rate: z.number(),
  average_reward: z.number(),
  status_counts: z.record(z.string(), z.number().int()),
});
export type OverallResult = z.infer<typeof OverallResult>;

/** Worker: GET /api/worker_status. */
export const WorkerStatusResponse = z.object({
  name: z.string(),
  concurrency: z.number().int(),
  current: z.number().int(),
  draining: z.boolean().optional(),
  episodes: z.number().int().optional(),
});
export type WorkerStatusResponse = z.infer<typeof WorkerStatusResponse>;

/** Worker: GET /api/get_sessions -> `{ "<session_id>": index }` (AgentBench shape). */
export const WorkerSessions = z.record(z.string(), z.number().int());
export type WorkerSessions = z.infer<typeof WorkerSessions>;

/** Controller: one worker as GET /api/list_workers reports it. */
export const WorkerInfo = z.object({
  id: z.number().int(),
  address: z.string(),
  capacity: z.number().int(),
  current: z.number().int(),
  last_visit: z.number(),
  status: WorkerState,
  /** Routed no new session (see POST /api/drain_worker); absent from controllers without pools. */
  draining: z.boolean().optional(),
  /** Sessions started on this worker (the larger of the controller's and the worker's count). */
  episodes: z.number().int().optional(),
  /** When the worker came up (seconds since the epoch), as its heartbeat says. */
  started_at: z.number().optional(),
});
export type WorkerInfo = z.infer<typeof WorkerInfo>;

/** Controller: GET /api/list_workers -> `{ "<task>": { indices, workers: { "<id>": WorkerInfo } } }`. */
export const ListWorkersResponse = z.record(
  z.string(),
  z.object({
    indices: z.array(z.number().int()),
    workers: z.record(z.string(), WorkerInfo),
    /** start_sample calls answered 406 (no free slot) for this task since the controller started. */
    rejected: z.number().int().optional(),
  }),
);

/** Controller: POST /api/drain_worker: route no new session to the worker at `address`. */
export const DrainWorker = z.object({ address: z.string().url() });
export type DrainWorker = z.infer<typeof DrainWorker>;
export type ListWorkersResponse = z.infer<typeof ListWorkersResponse>;

/** Controller: one session as GET /api/list_sessions reports it. */
export const SessionInfo = z.object({
  name: z.string(),
  index: z.number().int(),
  start: z.number(),
  last_update: z.number(),
  worker_id: z.number().int(),
});
export type SessionInfo = z.infer<typeof SessionInfo>;

/** Error body of every 4xx/5xx answer; `issues` name the failing fields of a 400. */
export const ErrorBody = z.looseObject({
  error: z.string(),
  issues: z.array(z.object({ path: z.string(), message: z.string() })).optional(),
  /** Set on 502 answers: why the session is gone (`worker_lost`, `session_lost`). */
  reason: z.string().optional(),
});
export type ErrorBody = z.infer<typeof ErrorBody>;
