import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import type { HttpLimitsConfig } from "../../shared/config/limits.ts";
import { calculateOverall } from "../../shared/env/worker.ts";
import { issuesOf, ValidationError } from "../../shared/errors.ts";
import { createApp, DEFAULT_HTTP_LIMITS, HttpError, listen, type RunningServer, readJson } from "../../shared/http.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import {
  CalculateOverall,
  ControllerCancel,
  ControllerInteract,
  ControllerStartSample,
  DrainWorker,
  ErrorBody,
  Heartbeat,
  InteractResponse,
  type ListWorkersResponse,
  OverallResult,
  SESSION_ID_HEADER,
  SessionIdHeader,
  type SessionInfo,
  StartSampleResponse,
  WorkerSessions,
  type WorkerState,
} from "../../shared/protocol/envApi.ts";
import { bearerHeader, requireBearer } from "../../shared/security/bearer.ts";
import { checkRegistration, DEFAULT_REGISTRATION_LIMITS, type RegistrationLimits } from "./registration.ts";

/**
 * The AgentRL / AgentBench FC controller: registers task workers by heartbeat, routes each new
 * session to the ALIVE worker of its task with the most free slots, pins it there, expires idle
 * sessions and reconciles its session table with each worker's.
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
  /** Body limit, header/request timeouts and connection cap of the server. @default limits.http defaults */
  readonly httpLimits?: HttpLimitsConfig;
  readonly log?: Logger;
}

interface WorkerRecord {
  readonly id: number;
  readonly task: string;
  readonly address: string;
  capacity: number;
  /** Sessions pinned here, as the controller counts them. */
  current: number;
  lastVisit: number;
  state: WorkerState;
  lastReconcile: number;
  reconciling: boolean;
  /** Routed no new session: its pool is retiring it (it stays reachable for its running sessions). */
  draining: boolean;
  /** Sessions started here (the larger of our count and the worker's own). */
  episodes: number;
  startedAt: number | undefined;
}

interface TaskRecord {
  indices: number[];
  indexSet: Set<number>;
  readonly workers: Map<number, WorkerRecord>;
  /** start_sample calls answered 406: the pool manager reads it as unmet demand. */
  rejected: number;
}

interface Session {
  readonly id: number;
  readonly task: string;
  readonly index: number;
  readonly worker: WorkerRecord;
  readonly start: number;
  lastUpdate: number;
  /** A start or interact call is in flight (not expired, not reconciled away). */
  busy: boolean;
  /** When the last call to the worker for this session returned (reconciliation compares it). */
  settledAt: number;
}

type WorkerCall =
  | { kind: "ok"; status: number; text: string }
  | { kind: "http"; status: number; text: string }
  | { kind: "timeout" }
  | { kind: "unreachable"; error: unknown };

/** The controller state machine plus its Hono app; {@link startController} binds it to a port. */
export class Controller {
  private readonly tasks = new Map<string, TaskRecord>();
  private readonly sessions = new Map<number, Session>();
  private nextWorkerId = 0;
  // Ids start from the clock so that a restarted controller never reuses ids workers still hold.
  private nextSessionId = Date.now() * 1000;
  private readonly sweepTimer: NodeJS.Timeout;
  private readonly heartbeatTimeoutMs: number;
  private readonly forgetAfterMs: number;
  private readonly sessionIdleTimeoutMs: number;
  private readonly reconcileIntervalMs: number;
  private readonly workerTimeoutMs: number;
  private readonly shortTimeoutMs: number;
  private readonly log: Logger;
  private readonly envSecret: string | undefined;
  private readonly controllerSecret: string | undefined;
  private readonly limits: RegistrationLimits;
  private readonly httpLimits: HttpLimitsConfig;

  constructor(options: ControllerOptions = {}) {
    this.envSecret = options.envSecret;
    this.controllerSecret = options.controllerSecret;
    this.limits = { ...DEFAULT_REGISTRATION_LIMITS, ...options.registrationLimits };
    this.httpLimits = options.httpLimits ?? DEFAULT_HTTP_LIMITS;
    this.heartbeatTimeoutMs = options.heartbeatTimeoutMs ?? 11_000;
    this.forgetAfterMs = options.forgetAfterMs ?? 35_000;
    this.sessionIdleTimeoutMs = options.sessionIdleTimeoutMs ?? 240_000;
    this.reconcileIntervalMs = options.reconcileIntervalMs ?? this.heartbeatTimeoutMs;
    this.workerTimeoutMs = options.workerTimeoutMs ?? 240_000;
    this.shortTimeoutMs = options.shortTimeoutMs ?? 5_000;
    this.log = options.log ?? createLogger({ role: "controller" });
    const sweepEvery = Math.max(20, Math.min(1_000, this.sessionIdleTimeoutMs / 4, this.heartbeatTimeoutMs / 2));
    this.sweepTimer = setInterval(() => this.sweep(), sweepEvery);
    this.sweepTimer.unref();
  }

  /** The Hono app with every controller endpoint under /api. */
  app() {
    const app = createApp(this.log, this.httpLimits);
    // Checked before any body is read: an unauthenticated call changes nothing.
    const workerAuth = requireBearer(this.envSecret, "env workers (AGENTRL_ENV_SECRET)");
    const callerAuth = requireBearer(
      this.controllerSecret,
      "rollout workers and evaluators (AGENTRL_CONTROLLER_SECRET)",
    );
    app.use("/api/*", (c, next) => (c.req.path === "/api/receive_heartbeat" ? workerAuth : callerAuth)(c, next));
    app.post("/api/receive_heartbeat", async (c) =>
      c.json(await this.receiveHeartbeat(await readJson(c, Heartbeat, "heartbeat"))),
    );
    app.post("/api/start_sample", async (c) =>
      this.startSample(c, await readJson(c, ControllerStartSample, "start_sample body")),
    );
    app.post("/api/interact", async (c) => {
      const sessionId = sessionIdFrom(c);
      return this.interact(c, sessionId, await readJson(c, ControllerInteract, "interact body"));
    });
    app.post("/api/cancel", async (c) => {
      const text = await c.req.text();
      const body = text.trim() ? await readBody(text, ControllerCancel, "cancel body") : {};
      const header = c.req.header(SESSION_ID_HEADER);
      const sessionId = header !== undefined ? sessionIdFrom(c) : body.session_id;
      if (sessionId === undefined) {
        throw new ValidationError("cancel request", [
          { path: SESSION_ID_HEADER, message: "missing session_id header" },
        ]);
      }
      return c.json({ session_id: sessionId, cancelled: await this.cancel(sessionId) });
    });
    app.post("/api/cancel_all", async (c) => c.json({ cancelled: await this.cancelAll() }));
    app.get("/api/list_workers", (c) => c.json(this.listWorkers()));
    app.post("/api/drain_worker", async (c) =>
      c.json(await this.drainWorker((await readJson(c, DrainWorker, "drain_worker body")).address)),
    );
    app.get("/api/list_sessions", (c) => c.json(this.listSessions()));
    app.get("/api/get_tasks", (c) => c.json([...this.tasks.keys()]));
    app.get("/api/get_indices", (c) => {
      const name = c.req.query("name");
      if (!name)
        throw new ValidationError("get_indices query", [{ path: "name", message: "required query parameter" }]);
      return c.json(this.taskOf(name).indices);
    });
    app.post("/api/calculate_overall", async (c) =>
      c.json(await this.calculateOverall(await readJson(c, CalculateOverall, "calculate_overall body"))),
    );
    return app;
  }

  // ---- registry ------------------------------------------------------------------------------

  private async receiveHeartbeat(beat: Heartbeat): Promise<{ worker_id: number; status: WorkerState }> {
    const now = Date.now();
    let task = this.tasks.get(beat.name);
    checkRegistration(
      beat,
      {
        taskKnown: task !== undefined,
        workerKnown: task !== undefined && [...task.workers.values()].some((w) => w.address === beat.address),
        tasks: this.tasks.size,
        workers: this.workerCount(),
      },
      this.limits,
    );
    const others = task ? [...task.workers.values()].filter((w) => w.address !== beat.address).length : 0;
    if (task && others > 0 && !sameIndices(task.indices, beat.indices)) {
      throw new HttpError(
        409,
        `indices: task ${beat.name} is already served with ${task.indices.length} other indices; a worker with different indices cannot join`,
      );
    }
    if (!task) {
      task = { indices: beat.indices, indexSet: new Set(beat.indices), workers: new Map(), rejected: 0 };
      this.tasks.set(beat.name, task);
    } else if (others === 0 && !sameIndices(task.indices, beat.indices)) {
      // The task's only worker came back with other indices (a new task version): take them.
      task.indices = beat.indices;
      task.indexSet = new Set(beat.indices);
    }
    // One address serves one task: a worker restarted with another task replaces the old entry.
    for (const [name, other] of this.tasks) {
      if (name === beat.name) continue;
      for (const w of other.workers.values())
        if (w.address === beat.address) this.forgetWorker(w, "re-registered for another task");
    }
    const existing = [...task.workers.values()].find((w) => w.address === beat.address);
    if (!existing) {
      const worker: WorkerRecord = {
        id: this.nextWorkerId++,
        task: beat.name,
        address: beat.address,
        capacity: beat.concurrency,
        current: 0,
        lastVisit: now,
        state: "ALIVE",
        lastReconcile: 0,
        reconciling: false,
        draining: beat.draining ?? false,
        episodes: beat.episodes ?? 0,
        startedAt: beat.started_at,
      };
      task.workers.set(worker.id, worker);
      this.log.info({ task: beat.name, address: beat.address, workerId: worker.id }, "worker registered");
      // A worker that outlived a controller restart may hold sessions nobody will finish.
      void this.reconcile(worker);
      return { worker_id: worker.id, status: worker.state };
    }
    existing.lastVisit = now;
    existing.capacity = beat.concurrency;
    // Draining is one-way: a heartbeat sent before a drain reached the worker does not undo it.
    existing.draining ||= beat.draining ?? false;
    existing.episodes = Math.max(existing.episodes, beat.episodes ?? 0);
    if (existing.state !== "ALIVE") {
      // Back from COMA/DEAD: only route to it again once its session table is known.
      if (await this.reconcile(existing)) {
        existing.state = "ALIVE";
        this.log.info({ task: beat.name, address: beat.address }, "worker alive again");
      }
    } else if (now - existing.lastReconcile >= this.reconcileIntervalMs) {
      void this.reconcile(existing);
    }
    return { worker_id: existing.id, status: existing.state };
  }

  /** Compares the worker's sessions with ours: drops sessions it lost, cancels ones we do not know. */
  private async reconcile(worker: WorkerRecord): Promise<boolean> {
    if (worker.reconciling) return worker.state === "ALIVE";
    worker.reconciling = true;
    const askedAt = Date.now();
    try {
      const call = await this.callWorker(worker, "get_sessions", undefined, this.shortTimeoutMs);
      if (call.kind === "timeout") {
        // Slow is not dead: keep the worker's state and try again on a later heartbeat.
        this.log.warn(
          { workerId: worker.id, address: worker.address },
          "get_sessions timed out; reconciliation skipped",
        );
        return false;
      }
      if (call.kind !== "ok") {
        this.markDead(worker, `get_sessions failed (${describeCall(call)})`);
        return false;
      }
      const parsed = WorkerSessions.safeParse(safeJson(call.text));
      if (!parsed.success) {
        this.markDead(worker, "get_sessions answered an invalid body");
        return false;
      }
      const held = new Set(Object.keys(parsed.data).map(Number));
      let pinned = 0;
      for (const session of this.sessions.values()) {
        if (session.worker !== worker) continue;
        // Only a session whose last call returned before we asked can be judged: the worker
        // registers a session before answering start_sample, so it must have listed it.
        if (!held.has(session.id) && !session.busy && session.settledAt < askedAt) {
          this.log.warn({ sessionId: session.id, workerId: worker.id }, "worker no longer holds session; dropped");
          this.dropSession(session);
        } else pinned += 1;
      }
      worker.current = pinned;
      for (const id of held) {
        if (this.sessions.get(id)?.worker !== worker) {
          this.log.info({ sessionId: id, workerId: worker.id }, "cancelling orphan session on worker");
          void this.callWorker(worker, "cancel", { session_id: id }, this.shortTimeoutMs);
        }
      }
      worker.lastReconcile = Date.now();
      return true;
    } finally {
      worker.reconciling = false;
    }
  }

  private markDead(worker: WorkerRecord, why: string): void {
    if (worker.state !== "DEAD") this.log.warn({ workerId: worker.id, address: worker.address, why }, "worker DEAD");
    worker.state = "DEAD";
  }

  private forgetWorker(worker: WorkerRecord, why: string): void {
    this.log.warn({ workerId: worker.id, address: worker.address, why }, "worker forgotten");
    const task = this.tasks.get(worker.task);
    task?.workers.delete(worker.id);
    // A task nobody serves any more is forgotten too, so stale names and indices do not pile up.
    if (task && task.workers.size === 0) this.tasks.delete(worker.task);
    for (const session of this.sessions.values()) if (session.worker === worker) this.dropSession(session);
  }

  private workerCount(): number {
    let count = 0;
    for (const task of this.tasks.values()) count += task.workers.size;
    return count;
  }

  private refreshState(worker: WorkerRecord, now: number): void {
    if (worker.state === "ALIVE" && now - worker.lastVisit > this.heartbeatTimeoutMs) {
      worker.state = "COMA";
      this.log.warn({ workerId: worker.id, address: worker.address }, "worker heartbeat stale: COMA");
    }
  }

  private sweep(): void {
    const now = Date.now();
    for (const task of this.tasks.values()) {
      for (const worker of task.workers.values()) {
        this.refreshState(worker, now);
        if (now - worker.lastVisit > this.forgetAfterMs) this.forgetWorker(worker, "no heartbeat");
      }
    }
    const cutoff = now - this.sessionIdleTimeoutMs;
    for (const session of this.sessions.values()) {
      if (!session.busy && session.lastUpdate < cutoff) {
        this.log.info({ sessionId: session.id, task: session.task }, "session idle too long; cancelled");
        this.dropSession(session);
        void this.callWorker(session.worker, "cancel", { session_id: session.id }, this.shortTimeoutMs);
      }
    }
  }

  // ---- sessions -----------------------------------------------------------------------------

  private taskOf(name: string): TaskRecord {
    const task = this.tasks.get(name);
    if (!task) {
      const known = [...this.tasks.keys()].join(", ") || "none yet";
      throw new HttpError(404, `name: no worker has registered task "${name}" (registered: ${known})`);
    }
    return task;
  }

  private pickWorker(task: TaskRecord, exclude: Set<number>): WorkerRecord | undefined {
    const now = Date.now();
    let best: WorkerRecord | undefined;
    for (const worker of task.workers.values()) {
      this.refreshState(worker, now);
      if (worker.state !== "ALIVE" || worker.draining || exclude.has(worker.id)) continue;
      const free = worker.capacity - worker.current;
      if (free > 0 && (!best || free > best.capacity - best.current)) best = worker;
    }
    return best;
  }

  private async startSample(c: Context, body: z.infer<typeof ControllerStartSample>) {
    const task = this.taskOf(body.name);
    if (!task.indexSet.has(body.index)) {
      throw new ValidationError("start_sample body", [
        {
          path: "index",
          message: `${body.index} is not an index of task ${body.name} (${task.indices.length} indices)`,
        },
      ]);
    }
    const tried = new Set<number>();
    for (;;) {
      const worker = this.pickWorker(task, tried);
      if (!worker) {
        task.rejected += 1;
        throw new HttpError(406, `no worker of task ${body.name} has a free slot (${task.workers.size} registered)`);
      }
      tried.add(worker.id);
      const now = Date.now();
      const session: Session = {
        id: this.nextSessionId++,
        task: body.name,
        index: body.index,
        worker,
        start: now,
        lastUpdate: now,
        busy: true,
        settledAt: Number.POSITIVE_INFINITY,
      };
      this.sessions.set(session.id, session);
      worker.current += 1;
      const call = await this.callWorker(
        worker,
        "start_sample",
        { index: body.index, session_id: session.id },
        this.workerTimeoutMs,
      );
      session.busy = false;
      session.settledAt = Date.now();
      if (call.kind === "unreachable" || call.kind === "timeout") {
        this.dropSession(session);
        if (call.kind === "unreachable") this.markDead(worker, `start_sample failed: ${describeCall(call)}`);
        else void this.callWorker(worker, "cancel", { session_id: session.id }, this.shortTimeoutMs);
        continue;
      }
      if (call.kind === "http") {
        this.dropSession(session);
        if (call.status === 406) {
          // Our count was behind the worker's; treat it as full until the next reconciliation.
          worker.current = Math.max(worker.current, worker.capacity);
          continue;
        }
        throw new HttpError(passThroughStatus(call.status), `worker ${worker.id}: ${errorOf(call.text)}`);
      }
      const parsed = StartSampleResponse.safeParse(safeJson(call.text));
      if (!parsed.success) {
        this.dropSession(session);
        void this.callWorker(worker, "cancel", { session_id: session.id }, this.shortTimeoutMs);
        throw new HttpError(
          502,
          `worker ${worker.id} answered start_sample with an invalid body: ${issueText(parsed.error)}`,
        );
      }
      // A worker that answers is alive even if its heartbeats queue behind our own load.
      worker.lastVisit = Math.max(worker.lastVisit, Date.now());
      worker.episodes += 1;
      if (parsed.data.finish || parsed.data.status !== "running") this.dropSession(session);
      c.header(SESSION_ID_HEADER, String(session.id));
      return c.json(parsed.data);
    }
  }

  private async interact(c: Context, sessionId: number, body: z.infer<typeof ControllerInteract>) {
    const session = this.sessions.get(sessionId);
    if (!session)
      throw new HttpError(404, `unknown session ${sessionId} (never started, finished, cancelled or expired)`);
    if (session.busy) throw new HttpError(409, `session ${sessionId} is still running the previous turn`);
    const worker = session.worker;
    if (worker.state === "DEAD" || !this.tasks.get(worker.task)?.workers.has(worker.id)) {
      this.dropSession(session);
      return lost(c, sessionId, "worker_lost", `the worker of session ${sessionId} (${worker.address}) is dead`);
    }
    session.busy = true;
    session.lastUpdate = Date.now();
    const call = await this.callWorker(
      worker,
      "interact",
      { session_id: sessionId, messages: body.messages },
      this.workerTimeoutMs,
    );
    session.busy = false;
    session.settledAt = Date.now();
    session.lastUpdate = Date.now();
    if (!this.sessions.has(sessionId)) {
      // Cancelled while the turn ran: the worker aborted it; report what it said if it is valid.
      const parsed = call.kind === "ok" ? InteractResponse.safeParse(safeJson(call.text)) : undefined;
      if (parsed?.success) return c.json(parsed.data);
      return lost(c, sessionId, "session_lost", `session ${sessionId} was cancelled during the turn`);
    }
    if (call.kind === "unreachable") {
      this.markDead(worker, `interact failed: ${describeCall(call)}`);
      this.dropSession(session);
      return lost(c, sessionId, "worker_lost", `the worker of session ${sessionId} (${worker.address}) is unreachable`);
    }
    if (call.kind === "timeout") {
      this.dropSession(session);
      void this.callWorker(worker, "cancel", { session_id: sessionId }, this.shortTimeoutMs);
      return lost(c, sessionId, "worker_timeout", `the worker did not answer within ${this.workerTimeoutMs} ms`);
    }
    if (call.kind === "http") {
      if (call.status === 404) {
        this.dropSession(session);
        return lost(c, sessionId, "session_lost", `the worker no longer holds session ${sessionId}`);
      }
      if (call.status >= 500) {
        this.dropSession(session);
        void this.callWorker(worker, "cancel", { session_id: sessionId }, this.shortTimeoutMs);
        return lost(c, sessionId, "worker_error", `worker error: ${errorOf(call.text)}`);
      }
      throw new HttpError(passThroughStatus(call.status), errorOf(call.text));
    }
    worker.lastVisit = Math.max(worker.lastVisit, Date.now());
    const parsed = InteractResponse.safeParse(safeJson(call.text));
    if (!parsed.success) {
      this.dropSession(session);
      void this.callWorker(worker, "cancel", { session_id: sessionId }, this.shortTimeoutMs);
      return lost(c, sessionId, "worker_error", `invalid interact answer from worker: ${issueText(parsed.error)}`);
    }
    if (parsed.data.finish || parsed.data.status !== "running") this.dropSession(session);
    return c.json(parsed.data);
  }

  /** Ends a session (idempotent): drops it here and asks its worker to cancel it. */
  async cancel(sessionId: number): Promise<boolean> {
    const session = this.sessions.get(sessionId);
    if (!session) return false;
    this.dropSession(session);
    const call = await this.callWorker(session.worker, "cancel", { session_id: sessionId }, this.shortTimeoutMs);
    if (call.kind === "unreachable") this.markDead(session.worker, `cancel failed: ${describeCall(call)}`);
    return true;
  }

  async cancelAll(): Promise<number> {
    const count = this.sessions.size;
    const workers = [...this.tasks.values()].flatMap((t) => [...t.workers.values()]);
    for (const session of [...this.sessions.values()]) this.dropSession(session);
    await Promise.all(workers.map((w) => this.callWorker(w, "cancel_all", {}, this.shortTimeoutMs)));
    return count;
  }

  private dropSession(session: Session): void {
    if (this.sessions.get(session.id) !== session) return;
    this.sessions.delete(session.id);
    session.worker.current = Math.max(0, session.worker.current - 1);
  }

  private async calculateOverall(body: CalculateOverall) {
    const task = body.name ? this.taskOf(body.name) : undefined;
    const worker = task
      ? (this.pickWorker(task, new Set()) ?? [...task.workers.values()].find((w) => w.state === "ALIVE"))
      : undefined;
    if (worker) {
      const call = await this.callWorker(worker, "calculate_overall", body, this.workerTimeoutMs);
      const parsed = call.kind === "ok" ? OverallResult.safeParse(safeJson(call.text)) : undefined;
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
    const worker = [...this.tasks.values()].flatMap((t) => [...t.workers.values()]).find((w) => w.address === target);
    if (!worker) throw new HttpError(404, `address: no registered worker at ${target}`);
    worker.draining = true;
    this.log.info({ workerId: worker.id, address: target, current: worker.current }, "worker draining");
    await this.callWorker(worker, "drain", {}, this.shortTimeoutMs);
    return { address: target, draining: true, current: worker.current };
  }

  // ---- views --------------------------------------------------------------------------------

  listWorkers(): ListWorkersResponse {
    const now = Date.now();
    const out: ListWorkersResponse = {};
    for (const [name, task] of this.tasks) {
      const workers: ListWorkersResponse[string]["workers"] = {};
      for (const w of task.workers.values()) {
        this.refreshState(w, now);
        workers[String(w.id)] = {
          id: w.id,
          address: w.address,
          capacity: w.capacity,
          current: w.current,
          last_visit: w.lastVisit / 1000,
          status: w.state,
          draining: w.draining,
          episodes: w.episodes,
          ...(w.startedAt !== undefined ? { started_at: w.startedAt } : {}),
        };
      }
      out[name] = { indices: task.indices, workers, rejected: task.rejected };
    }
    return out;
  }

  listSessions(): Record<string, SessionInfo> {
    const out: Record<string, SessionInfo> = {};
    for (const s of this.sessions.values()) {
      out[String(s.id)] = {
        name: s.task,
        index: s.index,
        start: s.start / 1000,
        last_update: s.lastUpdate / 1000,
        worker_id: s.worker.id,
      };
    }
    return out;
  }

  // ---- worker calls -------------------------------------------------------------------------

  private async callWorker(worker: WorkerRecord, path: string, body: unknown, timeoutMs: number): Promise<WorkerCall> {
    const deadline = AbortSignal.timeout(timeoutMs);
    for (let attempt = 0; ; attempt++) {
      try {
        const response = await fetch(`${worker.address}/${path}`, {
          method: body === undefined ? "GET" : "POST",
          headers: {
            ...(body === undefined ? {} : { "content-type": "application/json" }),
            ...bearerHeader(this.envSecret),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: deadline,
          // A worker address must not send us (and the secret) elsewhere: a 3xx is an error.
          redirect: "manual",
        });
        const text = await response.text();
        return response.ok
          ? { kind: "ok", status: response.status, text }
          : { kind: "http", status: response.status, text };
      } catch (error) {
        if (error instanceof Error && error.name === "TimeoutError") return { kind: "timeout" };
        // A pooled keep-alive socket the worker closed while idle fails before the worker read
        // the request; one retry on a fresh connection tells that race from a dead worker.
        if (attempt === 0 && isStaleSocket(error)) continue;
        return { kind: "unreachable", error };
      }
    }
  }

  close(): void {
    clearInterval(this.sweepTimer);
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

function sessionIdFrom(c: Context): number {
  const parsed = SessionIdHeader.safeParse(c.req.header(SESSION_ID_HEADER));
  if (!parsed.success) {
    throw new ValidationError("request headers", [
      { path: SESSION_ID_HEADER, message: parsed.error.issues[0]?.message ?? "invalid" },
    ]);
  }
  return parsed.data;
}

async function readBody<S extends z.ZodType>(text: string, schema: S, what: string): Promise<z.output<S>> {
  const value = safeJson(text);
  if (value === undefined) throw new ValidationError(what, [{ path: "", message: "not valid JSON" }]);
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new ValidationError(what, issuesOf(parsed.error));
  return parsed.data;
}

function lost(c: Context, sessionId: number, reason: string, error: string) {
  return c.json({ error, reason, session_id: sessionId, finish: true, status: "task error" }, 502);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function errorOf(text: string): string {
  const parsed = ErrorBody.safeParse(safeJson(text));
  return parsed.success ? parsed.data.error : text.slice(0, 300);
}

function issueText(error: z.ZodError): string {
  return issuesOf(error)
    .map((i) => `${i.path || "(root)"}: ${i.message}`)
    .join("; ");
}

function describeCall(call: WorkerCall): string {
  if (call.kind === "timeout") return "timed out";
  if (call.kind === "unreachable") {
    const cause = call.error instanceof Error ? (call.error.cause as { code?: string } | undefined) : undefined;
    return cause?.code ?? (call.error instanceof Error ? call.error.message : String(call.error));
  }
  return `HTTP ${call.status}`;
}

function isStaleSocket(error: unknown): boolean {
  const code = error instanceof Error ? (error.cause as { code?: string } | undefined)?.code : undefined;
  return code === "UND_ERR_SOCKET" || code === "ECONNRESET" || code === "EPIPE";
}

function passThroughStatus(status: number): ContentfulStatusCode {
  return (status >= 400 && status <= 599 ? status : 502) as ContentfulStatusCode;
}

function sameIndices(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
