import { z } from "zod";
import { ModelConfig } from "../../shared/config/policy.ts";
import type { GenerationResult, SchedulerStats } from "./scheduler.ts";

/**
 * Messages between the HTTP thread (ThreadedScheduler) and the decode worker (decodeWorker.ts).
 * They cross a structured-clone boundary, so each side parses what it receives; weights travel
 * as Float32Arrays whose buffers are transferred (moved, not copied).
 */

/** One policy version's weights, in checkpoint order. */
export const PolicyWeights = z.object({
  version: z.number().int().min(0),
  config: ModelConfig,
  names: z.array(z.string()),
  values: z.array(z.custom<Float32Array<ArrayBuffer>>((value) => value instanceof Float32Array)),
});
export type PolicyWeights = z.infer<typeof PolicyWeights>;

const count = z.number().int().min(0);

export const StatsMessage = z.object({
  decodeSteps: count,
  prefills: count,
  generatedTokens: count,
  maxBatch: count,
  batchedSequenceSteps: count,
  active: count,
  queued: count,
  policyVersion: z.number().int(),
  policySwitches: count,
  completed: count,
  failed: count,
  prefixCacheHits: count,
  prefixCacheReusedTokens: count,
  prefilledTokens: count,
}) satisfies z.ZodType<SchedulerStats>;

export const ResultMessage = z.object({
  tokens: z.array(z.number().int()),
  logprobs: z.array(z.number()),
  sampledLogprobs: z.array(z.number()),
  versions: z.array(z.number().int()),
  finishReason: z.enum(["stop", "length"]),
}) satisfies z.ZodType<GenerationResult>;

/** HTTP thread → worker. */
export const ToWorker = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("init"),
    /** The backend the HTTP thread runs (`wasm`, `cpu`, `tensorflow`): the worker starts the same one. */
    backend: z.enum(["wasm", "cpu", "tensorflow"]),
    capacity: z.number().int().min(1),
    stopTokenIds: z.array(z.number().int()),
    contextLength: z.number().int().min(1),
    weights: PolicyWeights,
  }),
  z.object({
    type: z.literal("generate"),
    id: count,
    job: z.object({
      prompt: z.array(z.number().int()),
      maxTokens: z.number().int(),
      temperature: z.number(),
      topP: z.number(),
      seed: z.number().int(),
    }),
  }),
  z.object({ type: z.literal("abort"), id: count }),
  z.object({ type: z.literal("switch"), id: count, weights: PolicyWeights }),
  z.object({ type: z.literal("stop") }),
]);
export type ToWorker = z.infer<typeof ToWorker>;

/** Worker → HTTP thread. Replies carry the counters as of that moment, so stats never lag a settled request. */
export const FromWorker = z.discriminatedUnion("type", [
  z.object({ type: z.literal("ready"), stats: StatsMessage }),
  z.object({ type: z.literal("initFailed"), message: z.string() }),
  z.object({ type: z.literal("stats"), stats: StatsMessage }),
  z.object({ type: z.literal("result"), id: count, result: ResultMessage, stats: StatsMessage }),
  // No counters when the worker has no scheduler (its init failed).
  z.object({ type: z.literal("failed"), id: count, message: z.string(), stats: StatsMessage.optional() }),
  z.object({ type: z.literal("switched"), id: count, previous: z.number().int(), stats: StatsMessage }),
  z.object({ type: z.literal("switchFailed"), id: count, message: z.string(), stats: StatsMessage.optional() }),
  /** One JSON log line of the worker's logger, re-emitted by the HTTP thread's logger. */
  z.object({ type: z.literal("log"), line: z.string() }),
  z.object({ type: z.literal("stopped") }),
]);
export type FromWorker = z.infer<typeof FromWorker>;
