import type { z } from "zod";
import { AgentRlError, issuesOf } from "../errors.ts";
import {
  ErrorBody,
  InteractResponse,
  ListWorkersResponse,
  type SampleStatus,
  SESSION_ID_HEADER,
  SessionIdHeader,
  StartSampleResponse,
} from "../protocol/envApi.ts";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../protocol/openai.ts";
import { bearerHeader } from "../security/bearer.ts";

/**
 * Base of every error the controller client throws. `retryable` tells the rollout worker what to
 * do: true = an infrastructure failure — abandon this session, start a fresh one, never score
 * it; false = the request itself was wrong and will fail again.
 */
export class EnvApiError extends AgentRlError {
  override readonly name: string = "EnvApiError";
  readonly retryable: boolean = false;
  constructor(
    message: string,
    /** HTTP status, when an answer came back. */
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** Infrastructure failure (retryable with a fresh session; the trajectory must not be scored). */
export class EnvInfrastructureError extends EnvApiError {
  override readonly name: string = "EnvInfrastructureError";
  override readonly retryable = true;
}

/** The controller could not be reached, timed out, or answered 5xx after all retries. */
export class EnvUnavailableError extends EnvInfrastructureError {
  override readonly name = "EnvUnavailableError";
}

/**
 * The session is gone for reasons outside the agent: its worker died (controller answers 502
 * with reason `worker_lost`), the session expired or is unknown (404). Start a fresh session.
 */
export class EnvSessionLostError extends EnvInfrastructureError {
  override readonly name = "EnvSessionLostError";
}

/** No worker has a free slot (HTTP 406): transient capacity, wait and start again. */
export class EnvCapacityError extends EnvInfrastructureError {
  override readonly name: string = "EnvCapacityError";
}

/**
 * No worker serves the task yet (HTTP 404 on start_sample): a pipeline starting, or a pool replacing
 * its last worker. The controller cannot tell that from a name no worker will ever serve, so callers
 * wait as for a full worker, for a bounded time, and then give the request up.
 */
export class EnvTaskNotServedError extends EnvCapacityError {
  override readonly name = "EnvTaskNotServedError";
}

/**
 * The environment ended the episode with a status that is not the agent's doing (`task error`,
 * `cancelled`, `unknown`): like a lost session, the attempt is abandoned, retried on a fresh
 * session and never scored.
 */
export class EnvEpisodeFailedError extends EnvInfrastructureError {
  override readonly name = "EnvEpisodeFailedError";
}

/** A 4xx the caller caused (malformed body, index out of range): never retried. */
export class EnvBadRequestError extends EnvApiError {
  override readonly name = "EnvBadRequestError";
}

/** A 2xx answer whose body does not match the protocol schema (a broken or foreign worker). */
export class EnvProtocolError extends EnvInfrastructureError {
  override readonly name = "EnvProtocolError";
}

export interface ControllerClientOptions {
  /** Controller base URL, with or without the `/api` suffix (e.g. `http://127.0.0.1:5020`). */
  readonly baseUrl: string;
  /**
   * Per-request timeout for start_sample and interact, in ms. Interact runs a tool call (an OS
   * command may take 30 s), so keep it above the slowest tool. @default 120000
   */
  readonly requestTimeoutMs?: number;
  /** Timeout of cancel and the small GET endpoints, in ms. @default 10000 */
  readonly shortTimeoutMs?: number;
  /** Retries after the first attempt, for requests that are safe to repeat. @default 4 */
  readonly maxRetries?: number;
  /** First backoff delay in ms; doubles per retry with jitter, capped at 5 s. @default 200 */
  readonly backoffMs?: number;
  /** Injected fetch (tests); defaults to the global keep-alive fetch. */
  readonly fetch?: typeof fetch;
  /** Bearer key of the controller's session API (AGENTRL_CONTROLLER_SECRET), when it requires one. */
  readonly token?: string;
}

/** A freshly started episode: the opening messages and tool schemas to render for the model. */
export interface StartedSample {
  readonly sessionId: number;
  readonly messages: ChatMessage[];
  readonly tools: ToolSpec[];
  readonly status: StartSampleResponse["status"];
  readonly finish: boolean;
  readonly reward: number;
  readonly metrics: Record<string, number>;
}

export interface RequestOptions {
  /** Aborts the request (the rollout was abandoned); the client then cancels the session. */
  readonly signal?: AbortSignal;
}

type Attempt = { ok: true; response: Response } | { ok: false; error: unknown };

/**
 * Typed client of the controller API for rollout workers.
 *
 * Retry policy: start_sample and cancel are retried with exponential backoff on connection
 * errors and 5xx; interact is retried only when the request provably was not applied
 * (connection refused, 503), because repeating a delivered turn would apply it twice. 4xx are
 * never retried. Errors are {@link EnvInfrastructureError} (retryable with a fresh session, never
 * scored) or {@link EnvBadRequestError}.
 *
 * @example
 * const env = new ControllerClient({ baseUrl: "http://127.0.0.1:5020" });
 * const sample = await env.startSample("db", 7);
 * try {
 *   const turn = await env.interact(sample.sessionId, assistantMessage);
 * } catch (error) {
 *   if (error instanceof EnvApiError && error.retryable) { ... start a fresh session ... }
 * }
 */
export class ControllerClient {
  private readonly api: string;
  private readonly fetchImpl: typeof fetch;
  private readonly requestTimeoutMs: number;
  private readonly shortTimeoutMs: number;
  private readonly maxRetries: number;
  private readonly backoffMs: number;
  private readonly authHeader: Record<string, string>;

  constructor(options: ControllerClientOptions) {
    this.authHeader = bearerHeader(options.token);
    this.api = apiBase(options.baseUrl);
    this.fetchImpl = options.fetch ?? fetch;
    this.requestTimeoutMs = options.requestTimeoutMs ?? 120_000;
    this.shortTimeoutMs = options.shortTimeoutMs ?? 10_000;
    this.maxRetries = options.maxRetries ?? 4;
    this.backoffMs = options.backoffMs ?? 200;
  }

  /** The `/api` base this client talks to. */
  get url(): string {
    return this.api;
  }

  /** POST /api/start_sample; the session id comes from the `session_id` response header. */
  async startSample(task: string, index: number, options: RequestOptions = {}): Promise<StartedSample> {
    const response = await this.send(
      "start_sample",
      { method: "POST", body: JSON.stringify({ name: task, index }) },
      { timeoutMs: this.requestTimeoutMs, retry: "transient", signal: options.signal },
    );
    const header = SessionIdHeader.safeParse(response.headers.get(SESSION_ID_HEADER) ?? undefined);
    const body = await parseBody(response, StartSampleResponse, "start_sample answer");
    if (!header.success) {
      throw new EnvProtocolError(`start_sample answer has no valid ${SESSION_ID_HEADER} header`, response.status);
    }
    return {
      sessionId: header.data,
      messages: body.messages,
      tools: body.tools,
      status: body.status,
      finish: body.finish,
      reward: body.reward,
      metrics: body.metric,
    };
  }

  /**
   * POST /api/interact with one assistant message; returns only the new messages. If `signal`
   * aborts or the request times out, the session is cancelled (best effort) before throwing.
   */
  async interact(
    sessionId: number,
    message: AssistantMessage,
    options: RequestOptions = {},
  ): Promise<InteractResponse> {
    try {
      const response = await this.send(
        "interact",
        {
          method: "POST",
          body: JSON.stringify({ messages: [message] }),
          headers: { [SESSION_ID_HEADER]: String(sessionId) },
        },
        { timeoutMs: this.requestTimeoutMs, retry: "unapplied", signal: options.signal },
      );
      return await parseBody(response, InteractResponse, "interact answer");
    } catch (error) {
      if (error instanceof EnvUnavailableError || options.signal?.aborted) void this.cancel(sessionId).catch(() => {});
      throw error;
    }
  }

  /** POST /api/cancel (idempotent). Never throws for an unknown or already finished session. */
  async cancel(sessionId: number): Promise<void> {
    const response = await this.send(
      "cancel",
      { method: "POST", body: "{}", headers: { [SESSION_ID_HEADER]: String(sessionId) } },
      { timeoutMs: this.shortTimeoutMs, retry: "transient" },
    );
    await response.body?.cancel();
  }

  /** GET /api/list_workers. */
  async listWorkers(): Promise<ListWorkersResponse> {
    const response = await this.send(
      "list_workers",
      { method: "GET" },
      { timeoutMs: this.shortTimeoutMs, retry: "transient" },
    );
    return parseBody(response, ListWorkersResponse, "list_workers answer");
  }

  /** POST /api/drain_worker: the controller routes no new session to the worker at `address`. */
  async drainWorker(address: string): Promise<void> {
    const response = await this.send(
      "drain_worker",
      { method: "POST", body: JSON.stringify({ address }) },
      { timeoutMs: this.shortTimeoutMs, retry: "transient" },
    );
    await response.body?.cancel();
  }

  private async send(
    path: string,
    init: { method: string; body?: string; headers?: Record<string, string> },
    policy: { timeoutMs: number; retry: "transient" | "unapplied"; signal?: AbortSignal },
  ): Promise<Response> {
    const url = `${this.api}/${path}`;
    for (let attempt = 0; ; attempt++) {
      policy.signal?.throwIfAborted();
      const signal = policy.signal
        ? AbortSignal.any([policy.signal, AbortSignal.timeout(policy.timeoutMs)])
        : AbortSignal.timeout(policy.timeoutMs);
      const result: Attempt = await this.fetchImpl(url, {
        method: init.method,
        body: init.body,
        headers: { "content-type": "application/json", ...this.authHeader, ...init.headers },
        signal,
      }).then(
        (response) => ({ ok: true as const, response }),
        (error: unknown) => ({ ok: false as const, error }),
      );
      if (!result.ok && policy.signal?.aborted) throw policy.signal.reason;
      const canRetry = attempt < this.maxRetries && shouldRetry(result, policy.retry);
      if (result.ok && result.response.ok) return result.response;
      if (canRetry) {
        if (result.ok) await result.response.body?.cancel();
        await sleep(backoff(this.backoffMs, attempt), policy.signal);
        continue;
      }
      if (!result.ok) {
        throw new EnvUnavailableError(
          `${path}: controller unreachable at ${url}: ${describe(result.error)}`,
          undefined,
          {
            cause: result.error,
          },
        );
      }
      throw await errorFromResponse(path, result.response);
    }
  }
}

/**
 * Whether a finished episode's status reflects the agent's behaviour and may be scored.
 * `task error` (the environment's code failed), `cancelled` (we or the controller stopped it)
 * and `unknown` are not the agent's doing: retry those with a fresh session, like an
 * {@link EnvInfrastructureError}. Agent outcomes: `completed`, `agent context limit`,
 * `agent validation failed`, `agent invalid action`, `task limit reached`.
 * @example if (turn.finish && !isAgentOutcome(turn.status)) throw new EnvEpisodeFailedError(turn.status);
 */
export function isAgentOutcome(status: SampleStatus): boolean {
  return (
    status === "completed" ||
    status === "agent context limit" ||
    status === "agent validation failed" ||
    status === "agent invalid action" ||
    status === "task limit reached"
  );
}

/** Normalizes a controller URL to its `/api` base. */
export function apiBase(baseUrl: string): string {
  const trimmed = baseUrl.replace(/\/+$/, "");
  return trimmed.endsWith("/api") ? trimmed : `${trimmed}/api`;
}

function shouldRetry(result: Attempt, retry: "transient" | "unapplied"): boolean {
  if (!result.ok) return retry === "transient" || isConnectionRefused(result.error);
  const status = result.response.status;
  if (retry === "unapplied") return status === 503;
  return status >= 500 && status !== 501;
}

function isConnectionRefused(error: unknown): boolean {
  const cause = error instanceof Error ? (error.cause as { code?: string } | undefined) : undefined;
  return cause?.code === "ECONNREFUSED";
}

async function errorFromResponse(path: string, response: Response): Promise<EnvApiError> {
  const text = await response.text().catch(() => "");
  let detail = text.slice(0, 500);
  try {
    const body = ErrorBody.safeParse(JSON.parse(text));
    if (body.success) {
      detail = body.data.reason ? `${body.data.error} (${body.data.reason})` : body.data.error;
    }
  } catch {
    // not JSON: keep the raw text
  }
  const message = `${path}: HTTP ${response.status}: ${detail}`;
  const status = response.status;
  if (status === 406) return new EnvCapacityError(message, status);
  if (status === 404 && path === "start_sample" && NO_WORKER_YET.test(detail))
    return new EnvTaskNotServedError(message, status);
  if (status === 502 || (status === 404 && path !== "start_sample")) return new EnvSessionLostError(message, status);
  if (status >= 500) return new EnvUnavailableError(message, status);
  return new EnvBadRequestError(message, status);
}

/** The controller's 404 for a task no worker has registered (functions/controller/registry.ts). */
const NO_WORKER_YET = /no worker has registered task/;

async function parseBody<S extends z.ZodType>(response: Response, schema: S, what: string): Promise<z.output<S>> {
  let value: unknown;
  try {
    value = await response.json();
  } catch (error) {
    throw new EnvProtocolError(`${what} is not JSON`, response.status, { cause: error });
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    const issues = issuesOf(parsed.error)
      .map((i) => `${i.path || "(root)"}: ${i.message}`)
      .join("; ");
    throw new EnvProtocolError(`invalid ${what}: ${issues}`, response.status);
  }
  return parsed.data;
}

function backoff(baseMs: number, attempt: number): number {
  const capped = Math.min(5_000, baseMs * 2 ** attempt);
  return capped / 2 + Math.random() * (capped / 2);
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const code = (error.cause as { code?: string } | undefined)?.code;
  if (error.name === "TimeoutError") return "request timed out";
  return code ? `${error.message} (${code})` : error.message;
}
