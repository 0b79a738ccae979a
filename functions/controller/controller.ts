import type { Hono } from "hono";
import type { HttpLimitsConfig } from "../../shared/config/limits.ts";
import { calculateOverall } from "../../shared/env/worker.ts";
import { DEFAULT_HTTP_LIMITS, HttpError, listen, type RunningServer } from "../../shared/http.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import {
  type CalculateOverall,
  type Heartbeat,
  type ListWorkersResponse,
  OverallResult,
  type SessionInfo,
  type WorkerState,
} from "../../shared/protocol/envApi.ts";
import { type ControllerApi, controllerApp } from "./app.ts";
import { DEFAULT_REGISTRATION_LIMITS, type RegistrationLimits } from "./registration.ts";
import { Registry } from "./registry.ts";
import { Sessions, type TurnResult } from "./sessions.ts";
import { WorkerClient } from "./workerCalls.ts";

/**
 * The AgentRL / AgentBench FC controller: registers task workers by heartbeat, routes each new
 * session to the ALIVE worker of its task with the most free slots, pins it there, expires idle
 * sessions and reconciles its session table with each worker's.
 *
 * Its parts: `registry.ts` (tasks, workers, heartbeats, caps), `sessions.ts` (the session table
 * and turn relay), `workerCalls.ts` (the pooled HTTP client to workers), `app.ts` (the routes).
 *
 * Worker states: ALIVE (heartbeat fresh), COMA (heartbeat older than `heartbeatTimeoutMs`: not
 * routed to), DEAD (a call to it failed: its sessions end). A worker silent for `forgetAfterMs`
 * is forgotten together with its sessions.
 *
 * Infrastructure failures never look like agent outcomes: when a session's worker dies, times
 * out or loses the session, interact answers **HTTP 502** `{error, reason, session_id}` with
 * reason `worker_lost` | `worker_timeout` | `worker_error` | `session_lost` and the session is
 * gone. Clients (ours: EnvSessionLostError) must restart with a fresh session and never score
 * it. A 200 always carries a real episode status.
 */
export interface ControllerOptions {
  /** A worker whose last heartbeat is older than this is COMA. @default 11000 (AgentBench) */
  readonly heartbeatTimeoutMs?: number;
  /** A worker silent for this long is removed with its sessions. @default 35000 (AgentBench) */
  readonly forgetAfterMs?: number;
  /** A session with no interact for this long is cancelled. @default 240000 (AgentBench) */
  readonly sessionIdleTimeoutMs?: number;
  /** Minimum time between two session-table reconciliations of one worker. @default heartbeatTimeoutMs */
  readonly reconcileIntervalMs?: number;
  /** Timeout of start_sample and interact calls to a worker. @default 240000 */
  readonly workerTimeoutMs?: number;
  /** Timeout of cancel, get_sessions and other small calls to a worker. @default 5000 */
  readonly shortTimeoutMs?: number;
  /**
   * Shared secret of controller and env workers (AGENTRL_ENV_SECRET): required on heartbeats and
   * sent on every call to a worker. Unset: heartbeats are open (local development only).
   */
  readonly envSecret?: string;
  /** Bearer key required on the session API (start_sample, interact, ...; AGENTRL_CONTROLLER_SECRET). */
  readonly controllerSecret?: string;
  /** Caps on registrations. @default DEFAULT_REGISTRATION_LIMITS */
  readonly registrationLimits?: Partial<RegistrationLimits>;
  /**
   * Body limit, header/request timeouts and connection cap of the server; the body limit also
   * caps the worker replies the controller reads. @default limits.http defaults
   */
  readonly httpLimits?: HttpLimitsConfig;
  readonly log?: Logger;
  /** Prometheus metrics at GET /metrics (requests, sessions, workers, capacity). @default - no /metrics */
  readonly metrics?: ServiceMetrics;
}

/** The controller state machine plus its Hono app; {@link startController} binds it to a port. */
export class Controller implements ControllerApi {
  private readonly calls: WorkerClient;
  private readonly registry: Registry;
  private readonly sessions: Sessions;
  private readonly sweepTimer: NodeJS.Timeout;
  private readonly options: ControllerOptions;
  private readonly log: Logger;
  private readonly httpLimits: HttpLimitsConfig;
  private readonly shortTimeoutMs: number;
  private readonly workerTimeoutMs: number;

  constructor(options: ControllerOptions = {}) {
    this.options = options;
    this.log = options.log ?? createLogger({ role: "controller" });
    this.httpLimits = options.httpLimits ?? DEFAULT_HTTP_LIMITS;
    const heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? 11_000;
    const sessionIdleTimeoutMs = options.sessionIdleTimeoutMs ?? 240_000;
    this.workerTimeoutMs = options.workerTimeoutMs ?? 240_000;
    this.shortTimeoutMs = options.shortTimeoutMs ?? 5_000;
    this.calls = new WorkerClient({
      ...(options.envSecret !== undefined ? { envSecret: options.envSecret } : {}),
      maxReplyBytes: this.httpLimits.bodyLimitBytes,
    });
    this.registry = new Registry(
      {
        heartbeatTimeoutMs,
        forgetAfterMs: options.forgetAfterMs ?? 35_000,
        reconcileIntervalMs: options.reconcileIntervalMs ?? heartbeatTimeoutMs,
        limits: { ...DEFAULT_REGISTRATION_LIMITS, ...options.registrationLimits },
        log: this.log,
      },
      {
        reconcile: (worker) => this.sessions.reconcile(worker),
        forgotten: (worker) => this.sessions.dropAllOf(worker),
      },
    );
    this.sessions = new Sessions(this.registry, this.calls, {
      workerTimeoutMs: this.workerTimeoutMs,
      shortTimeoutMs: this.shortTimeoutMs,
      sessionIdleTimeoutMs,
      log: this.log,
    });
    const sweepEvery = Math.max(20, Math.min(1_000, sessionIdleTimeoutMs / 4, heartbeatTimeoutMs / 2));
    this.sweepTimer = setInterval(() => this.sweep(), sweepEvery);
    this.sweepTimer.unref();
    if (options.metrics) this.describe(options.metrics);
  }

  /** Sessions and workers, read at scrape time. */
  private describe(metrics: ServiceMetrics): void {
    const perTask = (value: (task: ListWorkersResponse[string]) => number) => () =>
      Object.fromEntries(Object.entries(this.listWorkers()).map(([task, entry]) => [task, value(entry)]));
    const workers = (entry: ListWorkersResponse[string]) => Object.values(entry.workers);
    metrics.gaugesOf("agentrl_controller_sessions", "open sessions per task", "task", () => {
      const counts: Record<string, number> = {};
      for (const s of Object.values(this.listSessions())) counts[s.name] = (counts[s.name] ?? 0) + 1;
      return counts;
    });
    metrics.gaugesOf(
      "agentrl_controller_workers_alive",
      "ALIVE env workers per task",
      "task",
      perTask((e) => workers(e).filter((w) => w.status === "ALIVE").length),
    );
    metrics.gaugesOf(
      "agentrl_controller_capacity",
      "session slots of ALIVE workers per task",
      "task",
      perTask((e) =>
        workers(e)
          .filter((w) => w.status === "ALIVE")
          .reduce((sum, w) => sum + w.capacity, 0),
      ),
    );
    metrics.gaugesOf(
      "agentrl_controller_rejected",
      "start_sample calls answered 406 (no free slot) per task since start",
      "task",
      perTask((e) => e.rejected ?? 0),
    );
  }

  /** The Hono app with every controller endpoint under /api. */
  app(): Hono {
    return controllerApp(this, {
      envSecret: this.options.envSecret,
      controllerSecret: this.options.controllerSecret,
      httpLimits: this.httpLimits,
      log: this.log,
      ...(this.options.metrics ? { metrics: this.options.metrics } : {}),
    });
  }

  receiveHeartbeat(beat: Heartbeat): Promise<{ worker_id: number; status: WorkerState }> {
    return this.registry.receiveHeartbeat(beat);
  }

  startSample(name: string, index: number): Promise<{ sessionId: number; body: Uint8Array }> {
    return this.sessions.startSample(name, index);
  }

  interact(sessionId: number, messages: Parameters<Sessions["interact"]>[1]): Promise<TurnResult> {
    return this.sessions.interact(sessionId, messages);
  }

  /** Ends a session (idempotent): drops it here and asks its worker to cancel it. */
  cancel(sessionId: number): Promise<boolean> {
    return this.sessions.cancel(sessionId);
  }

  cancelAll(): Promise<number> {
    return this.sessions.cancelAll();
  }

  taskNames(): string[] {
    return this.registry.taskNames();
  }

  indicesOf(name: string): number[] {
    return this.registry.taskOf(name).indices;
  }

  /** The task's own scoring when one of its workers answers, else the AgentBench default. */
  async calculateOverall(body: CalculateOverall): Promise<OverallResult> {
    const task = body.name ? this.registry.taskOf(body.name) : undefined;
    const worker = task
      ? (this.registry.pickWorker(task, new Set()) ?? [...task.workers.values()].find((w) => w.state === "ALIVE"))
      : undefined;
    if (worker) {
      const call = await this.calls.call(worker.target, "calculate_overall", body, this.workerTimeoutMs);
      const parsed = call.kind === "ok" ? OverallResult.safeParse(safeJson(call.body)) : undefined;
      if (parsed?.success) return parsed.data;
    }
    return calculateOverall(body.results);
  }

  /**
   * Routes no new session to the worker at `address` (its running sessions finish) and tells the
   * worker, so that the drain outlives a controller restart through its heartbeats.
   */
  async drainWorker(address: string): Promise<{ address: string; draining: true; current: number }> {
    const target = address.replace(/\/+$/, "");
    const worker = this.registry.allWorkers().find((w) => w.address === target);
    if (!worker) throw new HttpError(404, `address: no registered worker at ${target}`);
    worker.draining = true;
    this.log.info({ workerId: worker.id, address: target, current: worker.current }, "worker draining");
    await this.calls.call(worker.target, "drain", {}, this.shortTimeoutMs);
    return { address: target, draining: true, current: worker.current };
  }

  listWorkers(): ListWorkersResponse {
    return this.registry.listWorkers();
  }

  listSessions(): Record<string, SessionInfo> {
    return this.sessions.list();
  }

  close(): void {
    clearInterval(this.sweepTimer);
    this.calls.close();
  }

  private sweep(): void {
    const now = Date.now();
    this.registry.sweep(now);
    this.sessions.expireIdle(now);
  }
}

export interface RunningController {
  readonly url: string;
  readonly port: number;
  readonly controller: Controller;
  close(): Promise<void>;
}

/**
 * Starts the controller on host:port (default 127.0.0.1:5020; port 0 picks a free one).
 * @example const ctl = await startController({ port: 0 }); new ControllerClient({ baseUrl: ctl.url });
 */
export async function startController(
  options: ControllerOptions & { port?: number; host?: string } = {},
): Promise<RunningController> {
  const controller = new Controller(options);
  let server: RunningServer;
  try {
    server = await listen(
      controller.app(),
      options.port ?? 5020,
      options.host ?? "127.0.0.1",
      options.httpLimits ?? DEFAULT_HTTP_LIMITS,
    );
  } catch (error) {
    controller.close();
    throw error;
  }
  return {
    url: server.url,
    port: server.port,
    controller,
    async close() {
      controller.close();
      await server.close();
    },
  };
}

function safeJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    return undefined;
  }
}
