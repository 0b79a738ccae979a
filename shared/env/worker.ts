import type { Context } from "hono";
import type { z } from "zod";
import type { EnvLimitsConfig, HttpLimitsConfig } from "../config/limits.ts";
import { createApp, DEFAULT_HTTP_LIMITS, HttpError, listen, readJson } from "../http.ts";
import { createLogger, type Logger } from "../log.ts";
import type { ServiceMetrics } from "../metrics.ts";
import {
  CalculateOverall,
  type Heartbeat,
  type InteractResponse,
  type OverallResult,
  SESSION_ID_HEADER,
  type StartSampleResponse,
  WorkerCancel,
  WorkerInteract,
  type WorkerSessions,
  WorkerStartSample,
  type WorkerStatusResponse,
} from "../protocol/envApi.ts";
import type { ToolSpec } from "../protocol/openai.ts";
import { bearerHeader, requireBearer } from "../security/bearer.ts";
import { DEFAULT_EPISODE_LIMITS, EpisodeSession, toolSpecs } from "./session.ts";
import type { TaskDefinition, TaskModule } from "./task.ts";

export interface ServeTaskOptions {
  /** Port to listen on; 0 picks a free one. @default 0 */
  readonly port?: number;
  /** @default "127.0.0.1" */
  readonly host?: string;
  /** Controller base URL (with or without `/api`); without it the worker sends no heartbeats. */
  readonly controllerUrl?: string;
  /** Sessions served at once; start_sample beyond it answers 406. @default 32 */
  readonly concurrency?: number;
  /** A session with no interact for this long is cancelled and dropped. @default 240000 (AgentBench) */
  readonly idleTimeoutMs?: number;
  /** Heartbeat period. @default 8000 (AgentBench) */
  readonly heartbeatMs?: number;
  /** Address announced to the controller (must end in `/api`). @default `<listen url>/api` */
  readonly address?: string;
  /**
   * Shared secret with the controller (AGENTRL_ENV_SECRET): sent on heartbeats and required on
   * every worker endpoint (401 without it). Unset: the worker is open (local development only).
   */
  readonly envSecret?: string;
  /** Body limit, header/request timeouts and connection cap of the server. @default limits.http defaults */
  readonly httpLimits?: HttpLimitsConfig;
  /** Reuse limits: the worker drains itself once they are reached (see {@link WorkerLimits}). */
  readonly limits?: WorkerLimits;
  /** Tool calls per turn and echo length of errors (`limits.env`). @default limits.env defaults */
  readonly episodeLimits?: EnvLimitsConfig;
  readonly log?: Logger;
  /** Prometheus metrics at GET /metrics: requests, sessions, slots, episodes. @default - no /metrics */
  readonly metrics?: ServiceMetrics;
}

/** What a {@link TaskWorker} needs of {@link ServeTaskOptions} (the socket's options stay with serveTask). */
export type TaskWorkerOptions = Pick<
  ServeTaskOptions,
  "concurrency" | "idleTimeoutMs" | "envSecret" | "httpLimits" | "limits" | "episodeLimits" | "metrics"
> & { readonly log: Logger };

/**
 * When a worker stops taking sessions. Enforced by the worker itself so that the limit is exact
 * (the Nth session is the last one, however fast starts arrive); the pool manager then stops it
 * once its running sessions have finished.
 */
export interface WorkerLimits {
  /** Sessions started before the worker drains. @default unlimited */
  readonly maxEpisodes?: number;
  /** Age after which the worker drains. @default unlimited */
  readonly maxAgeMs?: number;
}

export interface RunningWorker {
  /** Listen URL (without `/api`). */
  readonly url: string;
  /** Address announced in heartbeats: `<url>/api`. */
  readonly address: string;
  /** Sessions currently open. */
  readonly sessionCount: number;
  /** Takes no new session (limits reached or drained). */
  readonly draining: boolean;
  /** Sends one heartbeat now (also sent every heartbeatMs). */
  heartbeat(): Promise<void>;
  /** Stops heartbeats, cancels every session (their episodes' signals fire) and closes the server. */
  close(): Promise<void>;
}

interface WorkerSession {
  readonly id: number;
  readonly index: number;
  readonly abort: AbortController;
  episode?: EpisodeSession;
  lastActive: number;
  busy: boolean;
}

/**
 * The AgentRL task worker state and HTTP surface for one task, independent of the socket:
 * session table, concurrency limit (406), idle expiry and cancellation through each episode's
 * AbortSignal. {@link serveTask} binds it to a port and adds heartbeats.
 */
export class TaskWorker {
  private readonly sessions = new Map<number, WorkerSession>();
  private readonly tools: ToolSpec[];
  private readonly indices: number[];
  private readonly sweepTimer: NodeJS.Timeout;
  private readonly startedAt = Date.now();
  private episodes = 0;
  private drainReason: string | undefined;
  /** Called once when the worker starts draining (serveTask sends a heartbeat at once). */
  onDrain: () => void = () => {};

  readonly concurrency: number;
  private readonly idleTimeoutMs: number;
  private readonly log: Logger;
  private readonly envSecret: string | undefined;
  private readonly httpLimits: HttpLimitsConfig;
  private readonly limits: WorkerLimits;
  private readonly episodeLimits: EnvLimitsConfig;
  private readonly metrics: ServiceMetrics | undefined;

  constructor(
    readonly task: TaskDefinition,
    options: TaskWorkerOptions,
  ) {
    const concurrency = options.concurrency ?? 32;
    const idleTimeoutMs = options.idleTimeoutMs ?? 240_000;
    const limits = options.limits ?? {};
    this.concurrency = concurrency;
    this.idleTimeoutMs = idleTimeoutMs;
    this.log = options.log;
    this.envSecret = options.envSecret;
    this.httpLimits = options.httpLimits ?? DEFAULT_HTTP_LIMITS;
    this.metrics = options.metrics;
    if (this.metrics) {
      this.metrics.gaugeOf("agentrl_env_sessions", "open sessions", () => this.sessions.size);
      this.metrics.gaugeOf("agentrl_env_capacity", "sessions served at once at most", () => this.concurrency);
      this.metrics.gaugeOf("agentrl_env_draining", "1 while the worker takes no new session", () =>
        this.draining ? 1 : 0,
      );
      this.metrics.counterOf("agentrl_env_episodes_total", "sessions started", () => this.episodes);
    }
    this.limits = limits;
    this.episodeLimits = options.episodeLimits ?? DEFAULT_EPISODE_LIMITS;
    if (!Number.isInteger(concurrency) || concurrency < 1)
      throw new RangeError(`concurrency must be >= 1, got ${concurrency}`);
    if (limits.maxEpisodes !== undefined && !(Number.isInteger(limits.maxEpisodes) && limits.maxEpisodes >= 1))
      throw new RangeError(`maxEpisodes must be an integer >= 1, got ${limits.maxEpisodes}`);
    if (limits.maxAgeMs !== undefined && !(limits.maxAgeMs > 0))
      throw new RangeError(`maxAgeMs must be > 0, got ${limits.maxAgeMs}`);
    this.tools = toolSpecs(task);
    this.indices = taskIndices(task);
    this.sweepTimer = setInterval(() => this.expireIdle(), Math.max(20, Math.min(5_000, idleTimeoutMs / 4)));
    this.sweepTimer.unref();
  }

  get sessionCount(): number {
    return this.sessions.size;
  }

  get allIndices(): readonly number[] {
    return this.indices;
  }

  get draining(): boolean {
    this.checkAge();
    return this.drainReason !== undefined;
  }

  /** Stops taking sessions (idempotent); running sessions go on until they finish. */
  drain(reason: string): void {
    if (this.drainReason !== undefined) return;
    this.drainReason = reason;
    this.log.info(
      { task: this.task.name, reason, episodes: this.episodes, open: this.sessions.size },
      "worker draining",
    );
    this.onDrain();
  }

  private checkAge(): void {
    const { maxAgeMs } = this.limits;
    if (maxAgeMs !== undefined && this.drainReason === undefined && Date.now() - this.startedAt >= maxAgeMs)
      this.drain(`max age ${maxAgeMs} ms reached`);
  }

  /** The Hono app serving the worker endpoints under /api. */
  app() {
    const app = createApp(this.log, this.httpLimits, this.metrics);
    app.use("/api/*", requireBearer(this.envSecret, "the controller (AGENTRL_ENV_SECRET)"));
    app.post("/api/start_sample", async (c) =>
      this.startSample(c, await readJson(c, WorkerStartSample, "start_sample body")),
    );
    app.post("/api/interact", async (c) =>
      c.json(await this.interact(await readJson(c, WorkerInteract, "interact body"))),
    );
    app.post("/api/cancel", async (c) => {
      const { session_id } = await readJson(c, WorkerCancel, "cancel body");
      return c.json({ session_id, cancelled: await this.cancel(session_id) });
    });
    app.post("/api/cancel_all", async (c) => c.json({ cancelled: await this.cancelAll() }));
    app.get("/api/get_sessions", (c) => c.json(this.listSessions()));
    app.get("/api/worker_status", (c) =>
      c.json({
        name: this.task.name,
        concurrency: this.concurrency,
        current: this.sessions.size,
        draining: this.draining,
        episodes: this.episodes,
      } satisfies WorkerStatusResponse),
    );
    app.post("/api/drain", (c) => {
      this.drain("drained by request");
      return c.json({ draining: true, current: this.sessions.size });
    });
    app.get("/api/get_indices", (c) => c.json(this.indices));
    app.post("/api/calculate_overall", async (c) =>
      c.json(calculateOverall((await readJson(c, CalculateOverall, "calculate_overall body")).results)),
    );
    return app;
  }

  private async startSample(c: Context, body: { index: number; session_id: number }) {
    if (this.sessions.has(body.session_id)) throw new HttpError(409, `session ${body.session_id} already exists`);
    if (this.sessions.size >= this.concurrency) {
      throw new HttpError(406, `sample concurrency limit reached: ${this.concurrency}`);
    }
    // A draining worker answers like a full one: the controller tries another worker.
    if (this.draining) throw new HttpError(406, `worker draining (${this.drainReason})`);
    if (!inSplits(this.task, body.index)) {
      throw new HttpError(
        400,
        `index: ${body.index} is outside the ${this.task.name} splits (${describeSplits(this.task)})`,
      );
    }
    // The slot is taken before the (possibly slow) episode build so that concurrent starts see it.
    const session: WorkerSession = {
      id: body.session_id,
      index: body.index,
      abort: new AbortController(),
      lastActive: Date.now(),
      busy: true,
    };
    this.sessions.set(session.id, session);
    this.episodes += 1;
    if (this.limits.maxEpisodes !== undefined && this.episodes >= this.limits.maxEpisodes)
      this.drain(`max episodes ${this.limits.maxEpisodes} reached`);
    let episode: EpisodeSession;
    try {
      const started = await this.task.start(body.index, session.abort.signal);
      episode = new EpisodeSession(this.task, started, this.episodeLimits);
    } catch (error) {
      this.sessions.delete(session.id);
      if (session.abort.signal.aborted) throw new HttpError(409, `session ${session.id} was cancelled while starting`);
      this.log.error({ err: error, task: this.task.name, index: body.index }, "task failed to start an episode");
      throw new HttpError(500, `task ${this.task.name} failed to start index ${body.index}: ${errorText(error)}`);
    }
    if (session.abort.signal.aborted) {
      await episode.end("cancelled");
      throw new HttpError(409, `session ${session.id} was cancelled while starting`);
    }
    session.episode = episode;
    session.busy = false;
    session.lastActive = Date.now();
    c.header(SESSION_ID_HEADER, String(session.id));
    return c.json({
      messages: [...episode.initialMessages],
      tools: this.tools,
      status: "running",
      finish: false,
      reward: 0,
      metric: {},
    } satisfies StartSampleResponse);
  }

  private async interact(body: z.infer<typeof WorkerInteract>): Promise<InteractResponse> {
    const session = this.sessions.get(body.session_id);
    if (!session?.episode) throw new HttpError(404, `unknown session ${body.session_id}`);
    if (session.busy) throw new HttpError(409, `session ${body.session_id} is still running the previous turn`);
    const message = body.messages[body.messages.length - 1];
    if (!message) throw new HttpError(400, "messages: at least one assistant message is required");
    session.busy = true;
    try {
      const turn = await session.episode.interact(message, session.abort.signal);
      if (turn.finish) this.sessions.delete(session.id);
      return turn;
    } finally {
      session.busy = false;
      session.lastActive = Date.now();
    }
  }

  /** Cancels one session: aborts its signal (stopping running tool calls) and frees it. Idempotent. */
  async cancel(sessionId: number): Promise<boolean> {
    const session = this.sessions.get(sessionId);
    if (!session) return false;
    this.sessions.delete(sessionId);
    session.abort.abort(new Error(`session ${sessionId} cancelled`));
    await session.episode?.end("cancelled").catch((error: unknown) => {
      this.log.warn({ err: error, sessionId }, "episode close failed");
    });
    return true;
  }

  async cancelAll(): Promise<number> {
    const ids = [...this.sessions.keys()];
    await Promise.all(ids.map((id) => this.cancel(id)));
    return ids.length;
  }

  listSessions(): WorkerSessions {
    const out: WorkerSessions = {};
    for (const [id, session] of this.sessions) out[String(id)] = session.index;
    return out;
  }

  heartbeatBody(address: string): Heartbeat {
    return {
      name: this.task.name,
      address,
      concurrency: this.concurrency,
      indices: this.indices,
      draining: this.draining,
      episodes: this.episodes,
      started_at: this.startedAt / 1000,
    };
  }

  private expireIdle(): void {
    this.checkAge();
    const cutoff = Date.now() - this.idleTimeoutMs;
    for (const session of this.sessions.values()) {
      if (!session.busy && session.lastActive < cutoff) {
        this.log.info({ sessionId: session.id, task: this.task.name }, "session idle too long; cancelled");
        void this.cancel(session.id);
      }
    }
  }

  async close(): Promise<void> {
    clearInterval(this.sweepTimer);
    await this.cancelAll();
    await this.task.close?.();
  }
}

/**
 * Serves one task as an AgentRL / AgentBench FC task worker: the worker endpoints under /api
 * (start_sample, interact, cancel, cancel_all, get_sessions, worker_status, get_indices,
 * calculate_overall) plus heartbeats `{name, address, concurrency, indices}` to the controller.
 *
 * @example
 * const worker = await serveTask(await loadTaskModule("db"), { controllerUrl: "http://127.0.0.1:5020", concurrency: 32 });
 * // ... later
 * await worker.close();
 */
export async function serveTask(
  source: TaskModule | TaskDefinition,
  options: ServeTaskOptions = {},
): Promise<RunningWorker> {
  const task = "task" in source ? source.task : source;
  const log = options.log ?? createLogger({ role: "env-worker", task: task.name });
  const worker = new TaskWorker(task, { ...options, log });
  const server = await listen(
    worker.app(),
    options.port ?? 0,
    options.host ?? "127.0.0.1",
    options.httpLimits ?? DEFAULT_HTTP_LIMITS,
  );
  const address = (options.address ?? `${server.url}/api`).replace(/\/+$/, "");
  const heartbeatUrl = options.controllerUrl ? `${controllerApi(options.controllerUrl)}/receive_heartbeat` : undefined;
  let failures = 0;

  const heartbeat = async (): Promise<void> => {
    if (!heartbeatUrl) return;
    try {
      const response = await fetch(heartbeatUrl, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearerHeader(options.envSecret) },
        body: JSON.stringify(worker.heartbeatBody(address)),
        redirect: "manual",
        signal: AbortSignal.timeout(Math.max(5_000, options.heartbeatMs ?? 8_000)),
      });
      if (!response.ok) throw new Error(`HTTP ${response.status}: ${(await response.text()).slice(0, 300)}`);
      await response.body?.cancel();
      if (failures > 0) log.info({ controller: heartbeatUrl }, "heartbeat accepted again");
      failures = 0;
    } catch (error) {
      // Log the first failure and then every 10th, so a controller restart does not flood the log.
      if (failures % 10 === 0) log.warn({ err: error, controller: heartbeatUrl, failures }, "heartbeat failed");
      failures += 1;
    }
  };
  const timer = setInterval(() => void heartbeat(), options.heartbeatMs ?? 8_000);
  timer.unref();
  // Tell the controller at once, so it stops routing here before the next periodic heartbeat.
  worker.onDrain = () => void heartbeat();
  await heartbeat();

  return {
    url: server.url,
    address,
    get sessionCount() {
      return worker.sessionCount;
    },
    get draining() {
      return worker.draining;
    },
    heartbeat,
    async close() {
      clearInterval(timer);
      await worker.close();
      await server.close();
    },
  };
}

/** All instance indices of a task (train then test), as heartbeats and get_indices report them. */
export function taskIndices(task: TaskDefinition): number[] {
  const out = new Set<number>();
  for (const range of [task.splits.train, task.splits.test]) {
    for (let i = range.start; i < range.end; i++) out.add(i);
  }
  return [...out];
}

function inSplits(task: TaskDefinition, index: number): boolean {
  const { train, test } = task.splits;
  return (index >= train.start && index < train.end) || (index >= test.start && index < test.end);
}

function describeSplits(task: TaskDefinition): string {
  const { train, test } = task.splits;
  return `train [${train.start}, ${train.end}), test [${test.start}, ${test.end})`;
}

/** Success (`completed` with reward > 0), mean reward and status counts over finished samples. */
export function calculateOverall(results: CalculateOverall["results"]): OverallResult {
  const statusCounts: Record<string, number> = {};
  let rewardSum = 0;
  let successes = 0;
  for (const result of results) {
    const status = result.status ?? "unknown";
    statusCounts[status] = (statusCounts[status] ?? 0) + 1;
    rewardSum += result.reward ?? 0;
    if (status === "completed" && (result.reward ?? 0) > 0) successes += 1;
  }
  const total = results.length;
  return {
    total,
    success_rate: total ? successes / total : 0,
    average_reward: total ? rewardSum / total : 0,
    status_counts: statusCounts,
  };
}

function controllerApi(url: string): string {
  const trimmed = url.replace(/\/+$/, "");
  return trimmed.endsWith("/api") ? trimmed : `${trimmed}/api`;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
