import { randomUUID } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { Hono } from "hono";
import type { ChatCodec } from "../../shared/chat/index.ts";
import { LimitsConfig } from "../../shared/config/limits.ts";
import { ValidationError } from "../../shared/errors.ts";
import { createApp, HttpError, readJson } from "../../shared/http.ts";
import type { Logger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import { backendInfo } from "../../shared/model/backend.ts";
import type { InferencePolicy } from "../../shared/model/types.ts";
import {
  type ChatCompletionChoice,
  ChatCompletionRequest,
  type ChatCompletionResponse,
  POLICY_VERSION_HEADER,
  UpdateWeightsFromDiskRequest,
  type UpdateWeightsFromDiskResponse,
} from "../../shared/protocol/openai.ts";
import { requireBearer } from "../../shared/security/bearer.ts";
import type { Pool } from "./follower.ts";
import { BatchScheduler, GenerationError, type GenerationResult, type Generator } from "./scheduler.ts";
import { canRunInWorker, ThreadedScheduler } from "./threaded.ts";

export interface PolicyServerOptions {
  /** The version served first; later versions arrive through `install`. */
  readonly policy: InferencePolicy;
  readonly codec: ChatCodec;
  readonly log: Logger;
  /** Decoder slots: most sequences decoded together. */
  readonly maxBatch: number;
  /** Name reported by /v1/models and in responses. @default "agentrl-<pool>" */
  readonly modelName?: string;
  readonly pool?: Pool;
  /** Loads a Hugging Face folder as `version`: enables SGLang's `POST /update_weights_from_disk`. */
  readonly loadWeights?: (modelPath: string, version: number) => Promise<InferencePolicy>;
  /** Bearer key required on /v1/* and /stats (AGENTRL_POLICY_API_KEY); /health stays open for load balancers. */
  readonly apiKey?: string;
  /** HTTP limits, queued-sequence cap and per-request deadline. @default the `limits` config defaults */
  readonly limits?: LimitsConfig;
  /**
   * Where prefill and decode run: `worker` (a worker thread, so HTTP is answered while a step runs)
   * or `main` (this thread, yielding between steps). The worker needs a policy built by
   * shared/model, whose weights it is handed.
   * @default "worker" for such policies on the wasm and cpu backends; "main" on native TF
   * (tfjs-node, untested in a worker) and for other policies (test doubles that live in this thread)
   */
  readonly decodeThread?: "worker" | "main";
  /** Prometheus metrics at GET /metrics: requests, queue, batch, generated tokens, version. @default - no /metrics */
  readonly metrics?: ServiceMetrics;
  /**
   * The version this server's pool serves when `newest` is the newest published (a request's
   * `agentrl.newest_version`, sync mode). @default newest itself (the current pool)
   */
  readonly versionFor?: (newest: number) => number;
  /** How long a request pinned to a version not loaded yet waits for it before answering 503. @default 60 */
  readonly pinnedWaitSeconds?: number;
}

/** A policy server: the HTTP app plus the scheduler and the hook that swaps weights. */
export interface PolicyServer {
  readonly app: Hono;
  readonly scheduler: Generator;
  /** Resolves when the decode loop takes requests (the worker has its backend and weights); rejects if it cannot start. */
  readonly ready: Promise<void>;
  /** Version currently served. */
  version(): number;
  /** Switches to `policy` between decode steps, then frees the previous policy. */
  install(policy: InferencePolicy): Promise<void>;
  /** Stops the scheduler (queued and running requests fail) and frees the policy. */
  close(): Promise<void>;
}

/**
 * OpenAI-compatible chat completions over a continuous-batching scheduler:
 * - `POST /v1/chat/completions` — messages + tools → assistant message with `tool_calls`; each
 *   choice carries `agentrl` (GenerationTrace: generated ids, their log-probs, per-token policy
 *   versions, prompt ids). `agentrl.prompt_token_ids` in the request replaces rendering;
 *   `agentrl.newest_version` pins the weights that answer (waits for them to load; 409 once past them).
 * - `GET /v1/models`, `GET /health`, `GET /stats` (decode steps, batch sizes: batching made visible).
 * A prompt that does not fit the context window answers 400 naming `messages`; `max_tokens` is
 * clamped to the room left (finish_reason `length` says so).
 */
export function createPolicyServer(options: PolicyServerOptions): PolicyServer {
  const { codec, log } = options;
  const pool = options.pool ?? "current";
  const modelName = options.modelName ?? `agentrl-${pool}`;
  const { contextLength, vocabSize } = options.policy.config;
  let current = options.policy;
  // Native TF (tfjs-node/-gpu) in a second thread is untested here, and on a GPU a second context
  // would hold a second copy of the weights: device backends keep decoding in this thread by default.
  const onDevice = backendInfo()?.name === "tensorflow" || backendInfo()?.name === "webgpu";
  const workerByDefault = canRunInWorker(current) && !onDevice;
  const decodeThread = options.decodeThread ?? (workerByDefault ? "worker" : "main");
  const schedulerOptions = { stopTokenIds: codec.stopTokenIds, contextLength, log };
  // The worker builds its own decoder from the weights; this thread keeps `current` to restart it from.
  const decoder = decodeThread === "main" ? current.createDecoder(options.maxBatch) : undefined;
  const scheduler: Generator = decoder
    ? new BatchScheduler(decoder, schedulerOptions)
    : new ThreadedScheduler(current, { ...schedulerOptions, capacity: options.maxBatch });
  const startedAt = Math.floor(Date.now() / 1000);

  const limits = options.limits ?? LimitsConfig.parse({});
  const app = createApp(log, limits.http, options.metrics);
  if (options.metrics) describeScheduler(options.metrics, scheduler);
  // No token covers more UTF-16 units than its UTF-8 bytes, so text/maxTokenBytes bounds the
  // prompt's token count from below: a prompt that cannot fit is refused before tokenizing it.
  const maxTokenBytes = longestTokenBytes(codec);
  const auth = requireBearer(options.apiKey, "policy clients (AGENTRL_POLICY_API_KEY)");

  /** Waits (bounded) until this server serves its pool's version for `newest`; 409 if it is past it. */
  const awaitPinned = async (newest: number, signal: AbortSignal): Promise<void> => {
    const wanted = options.versionFor?.(newest) ?? newest;
    const deadline = Date.now() + (options.pinnedWaitSeconds ?? 60) * 1000;
    while (current.version < wanted) {
      if (Date.now() > deadline || signal.aborted) {
        throw new HttpError(
          503,
          `pinned to version ${wanted} (newest ${newest}), still serving ${current.version}: retry once it has loaded`,
        );
      }
      await sleep(50);
    }
    if (current.version > wanted)
      throw new HttpError(
        409,
        `pinned to version ${wanted} (newest ${newest}), but this ${pool} server already serves ${current.version}`,
      );
  };
  app.use("/v1/*", auth);
  app.use("/stats", auth);
  app.use("/update_weights_from_disk", auth); // loading weights is at least as privileged as asking for tokens

  app.get("/health", (c) =>
    c.json({ status: "ok", pool, policyVersion: scheduler.policyVersion, ...pick(scheduler.stats()) }),
  );
  app.get("/stats", (c) => c.json(scheduler.stats()));
  app.get("/v1/models", (c) =>
    c.json({
      object: "list",
      data: [
        {
          id: modelName,
          object: "model",
          created: startedAt,
          owned_by: "agentrl",
          policy_version: scheduler.policyVersion,
          pool,
          context_length: contextLength,
        },
      ],
    }),
  );

  // SGLang-style weight sync, so the external-engine sync path runs against this server too.
  app.post("/update_weights_from_disk", async (c) => {
    const request = await readJson(c, UpdateWeightsFromDiskRequest, "update_weights_from_disk request");
    if (!options.loadWeights) throw new HttpError(501, "this server was started without a weight loader");
    const version = request.weight_version ?? scheduler.policyVersion + 1;
    let policy: InferencePolicy;
    try {
      policy = await options.loadWeights(request.model_path, version);
    } catch (error) {
      const body: UpdateWeightsFromDiskResponse = {
        success: false,
        message: `model_path: ${(error as Error).message}`,
      };
      return c.json(body, 400);
    }
    try {
      await install(policy);
    } catch (error) {
      // A different architecture does not fit the running decoder: keep serving the old weights.
      policy.dispose();
      const body: UpdateWeightsFromDiskResponse = { success: false, message: (error as Error).message };
      return c.json(body, 400);
    }
    const body: UpdateWeightsFromDiskResponse = { success: true, message: `serving version ${version}` };
    return c.json(body);
  });

  app.post("/v1/chat/completions", async (c) => {
    const request = await readJson(c, ChatCompletionRequest, "chat completion request");
    if (request.agentrl?.newest_version !== undefined)
      await awaitPinned(request.agentrl.newest_version, c.req.raw.signal);
    if (request.agentrl?.prompt_token_ids === undefined) {
      const atLeast = Math.ceil(promptTextLength(request) / maxTokenBytes);
      if (atLeast >= contextLength)
        throw new ValidationError("chat completion request", [
          {
            path: "messages",
            message: `the prompt is at least ${atLeast} tokens but the context window is ${contextLength} tokens; shorten the conversation`,
          },
        ]);
    }
    const { queued, active } = scheduler.stats();
    if (queued + request.n > limits.policy.maxQueuedSequences) {
      c.header("retry-after", String(Math.max(1, Math.ceil(queued / Math.max(1, options.maxBatch)))));
      throw new HttpError(
        429,
        `${queued} sequences are queued (${active} decoding); the cap is ${limits.policy.maxQueuedSequences} (limits.policy.maxQueuedSequences): retry later`,
      );
    }
    const prompt = request.agentrl?.prompt_token_ids ?? codec.promptTokens(request.messages, request.tools);
    const badId = prompt.findIndex((id) => id >= vocabSize);
    if (badId >= 0)
      throw new ValidationError("chat completion request", [
        {
          path: `agentrl.prompt_token_ids[${badId}]`,
          message: `token id ${prompt[badId]} is outside the vocabulary 0..${vocabSize - 1}`,
        },
      ]);
    if (prompt.length >= contextLength)
      throw new ValidationError("chat completion request", [
        {
          path: request.agentrl?.prompt_token_ids ? "agentrl.prompt_token_ids" : "messages",
          message: `the prompt is ${prompt.length} tokens but the context window is ${contextLength} tokens (at most ${contextLength - 1} prompt tokens leave room to generate); shorten the conversation`,
        },
      ]);
    const room = contextLength - prompt.length;
    const maxTokens = Math.min(request.max_tokens ?? room, room);
    const baseSeed = request.seed ?? Math.floor(Math.random() * 2 ** 32);
    const deadline = AbortSignal.timeout(limits.policy.requestDeadlineSeconds * 1000);
    const signal = AbortSignal.any([c.req.raw.signal, deadline]);
    const results = await Promise.all(
      Array.from({ length: request.n }, (_, i) =>
        scheduler.generate({
          prompt,
          maxTokens,
          temperature: request.temperature,
          topP: request.top_p,
          seed: (baseSeed + i) >>> 0,
          signal,
        }),
      ),
    ).catch((error: unknown) => {
      // Shutdown or a failed decode step: the request cannot be served now, the server lives on.
      if (error instanceof GenerationError && deadline.aborted)
        throw new HttpError(
          504,
          `the request ran past its deadline of ${limits.policy.requestDeadlineSeconds} s (limits.policy.requestDeadlineSeconds)`,
        );
      if (error instanceof GenerationError) throw new HttpError(503, error.message);
      throw error;
    });
    const id = `chatcmpl-${randomUUID()}`;
    const choices = results.map((result, index) =>
      toChoice(result, index, `call_${id.slice(8, 16)}_${index}`, prompt, request),
    );
    const completionTokens = results.reduce((sum, r) => sum + r.tokens.length, 0);
    const body: ChatCompletionResponse = {
      id,
      object: "chat.completion",
      created: Math.floor(Date.now() / 1000),
      model: modelName,
      choices,
      ...(request.return_token_ids ? { prompt_token_ids: [...prompt] } : {}),
      usage: {
        prompt_tokens: prompt.length,
        completion_tokens: completionTokens,
        total_tokens: prompt.length + completionTokens,
      },
    };
    // The version that produced the last token: clients that read only OpenAI fields (vLLM dialect) take it from here.
    c.header(
      POLICY_VERSION_HEADER,
      String(Math.max(...results.map((r) => r.versions.at(-1) ?? scheduler.policyVersion))),
    );
    return c.json(body);
  });

  async function install(policy: InferencePolicy): Promise<void> {
    const previous = current;
    try {
      await scheduler.switchPolicy(policy);
    } catch (error) {
      // Not installed (a refused switch, or the server is stopping): nothing else holds it.
      if (policy !== current) policy.dispose();
      throw error;
    }
    current = policy;
    if (previous !== policy) previous.dispose();
  }

  function toChoice(
    result: GenerationResult,
    index: number,
    idPrefix: string,
    prompt: readonly number[],
    request: ChatCompletionRequest,
  ): ChatCompletionChoice {
    const parsed = codec.parseGenerated(result.tokens, idPrefix);
    const message =
      request.tool_choice === "none" ? { role: "assistant" as const, content: parsed.text } : parsed.message;
    const hasCalls = (message.tool_calls?.length ?? 0) > 0;
    return {
      index,
      message,
      finish_reason: hasCalls ? "tool_calls" : result.finishReason,
      logprobs: request.logprobs
        ? {
            content: result.tokens.map((token, t) => ({
              token: codec.decode([token]),
              logprob: result.logprobs[t] as number,
              bytes: codec.tokenizer.tokenBytes(token),
              top_logprobs: [],
            })),
          }
        : null,
      ...(request.return_token_ids ? { token_ids: result.tokens } : {}),
      agentrl: {
        token_ids: result.tokens,
        logprobs: result.logprobs,
        sampled_logprobs: result.sampledLogprobs,
        policy_versions: result.versions,
        prompt_token_ids: [...prompt],
        prompt_truncated: false,
      },
    };
  }

  return {
    app,
    scheduler,
    ready: scheduler instanceof ThreadedScheduler ? scheduler.ready : Promise.resolve(),
    version: () => scheduler.policyVersion,
    install,
    async close(): Promise<void> {
      await scheduler.stop();
      decoder?.dispose();
      current.dispose();
    },
  };
}

/** Characters the template will tokenize from the request's own text (messages, tool calls, tool specs). */
function promptTextLength(request: ChatCompletionRequest): number {
  let length = 0;
  for (const message of request.messages) {
    length += message.content?.length ?? 0;
    if (message.role === "assistant")
      for (const call of message.tool_calls ?? []) length += call.function.name.length + call.function.arguments.length;
  }
  return length;
}

function longestTokenBytes(codec: ChatCodec): number {
  let longest = 1;
  for (let id = 0; id < codec.tokenizer.size; id++) longest = Math.max(longest, codec.tokenizer.tokenBytes(id).length);
  return longest;
}

function pick(stats: ReturnType<Generator["stats"]>): { active: number; queued: number } {
  return { active: stats.active, queued: stats.queued };
}

/** The scheduler's queue, batch and totals, read at scrape time (tokens/s is `rate(agentrl_policy_generated_tokens_total[1m])`). */
function describeScheduler(metrics: ServiceMetrics, scheduler: Generator): void {
  metrics.gaugeOf(
    "agentrl_policy_queued_sequences",
    "requests waiting for a decoder slot",
    () => scheduler.stats().queued,
  );
  metrics.gaugeOf("agentrl_policy_active_sequences", "sequences being decoded", () => scheduler.stats().active);
  metrics.gaugeOf("agentrl_policy_version", "policy version served", () => scheduler.stats().policyVersion);
  metrics.counterOf(
    "agentrl_policy_generated_tokens_total",
    "tokens generated",
    () => scheduler.stats().generatedTokens,
  );
  metrics.counterOf(
    "agentrl_policy_prefilled_tokens_total",
    "prompt tokens prefilled",
    () => scheduler.stats().prefilledTokens,
  );
  metrics.counterOf("agentrl_policy_decode_steps_total", "batched decode steps", () => scheduler.stats().decodeSteps);
  metrics.counterOf(
    "agentrl_policy_batched_sequence_steps_total",
    "sequences summed over decode steps (mean batch = rate of this / rate of decode steps)",
    () => scheduler.stats().batchedSequenceSteps,
  );
  metrics.counterOf("agentrl_policy_completed_total", "generations completed", () => scheduler.stats().completed);
  metrics.counterOf("agentrl_policy_failed_total", "generations failed", () => scheduler.stats().failed);
}
