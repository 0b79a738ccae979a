import type { ContentfulStatusCode } from "hono/utils/http-status";
import { z } from "zod";
import { issuesOf, ValidationError } from "../../shared/errors.ts";
import { HttpError } from "../../shared/http.ts";
import type { Logger } from "../../shared/log.ts";
import {
  type ControllerInteract,
  ErrorBody,
  SampleStatus,
  type SessionInfo,
  WorkerSessions,
} from "../../shared/protocol/envApi.ts";
import type { Registry, WorkerRecord } from "./registry.ts";
import { describeCall, type WorkerCall, type WorkerClient } from "./workerCalls.ts";

/**
 * The controller's session table: routes each new session to a worker of its task, pins it
 * there, relays its turns, expires idle sessions and reconciles the table with each worker's.
 *
 * Worker answers are passed through as the worker's bytes. The controller reads only what routing
 * needs — `finish` and `status`, to know whether the session ended — and never re-serializes the
 * rest; callers validate the whole answer (ours: ControllerClient). A 200 always carries a real
 * episode status: an answer without a valid `status`/`finish` is the worker's failure (502).
 */
export interface SessionOptions {
  /** Timeout of start_sample and interact calls to a worker. */
  readonly workerTimeoutMs: number;
  /** Timeout of cancel, get_sessions and other small calls to a worker. */
  readonly shortTimeoutMs: number;
  /** A session with no interact for this long is cancelled. */
  readonly sessionIdleTimeoutMs: number;
  readonly log: Logger;
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

/** Why a session ended for infrastructure reasons (interact answers 502 with it). */
export type LostReason = "worker_lost" | "worker_timeout" | "worker_error" | "session_lost";

/** A turn's outcome: the worker's answer as it sent it, or the session lost to the infrastructure. */
export type TurnResult =
  | { readonly kind: "reply"; readonly body: Uint8Array }
  | { readonly kind: "lost"; readonly reason: LostReason; readonly error: string };

/** The only fields of a worker's start_sample/interact answer that the controller reads. */
const RoutingFields = z.object({ finish: z.boolean(), status: SampleStatus });
type RoutingFields = z.infer<typeof RoutingFields>;

export class Sessions {
  private readonly sessions = new Map<number, Session>();
  // Ids start from the clock so that a restarted controller never reuses ids workers still hold.
  private nextSessionId = Date.now() * 1000;

  constructor(
    private readonly registry: Registry,
    private readonly calls: WorkerClient,
    private readonly options: SessionOptions,
  ) {}

  /** Starts a session of `name`/`index` on the worker with the most free slots; 406 when none has one. */
  async startSample(name: string, index: number): Promise<{ sessionId: number; body: Uint8Array }> {
    const task = this.registry.taskOf(name);
    if (!task.indexSet.has(index)) {
      throw new ValidationError("start_sample body", [
        { path: "index", message: `${index} is not an index of task ${name} (${task.indices.length} indices)` },
      ]);
    }
    const tried = new Set<number>();
    for (;;) {
      const worker = this.registry.pickWorker(task, tried);
      if (!worker) {
        task.rejected += 1;
        throw new HttpError(406, `no worker of task ${name} has a free slot (${task.workers.size} registered)`);
      }
      tried.add(worker.id);
      const now = Date.now();
      const session: Session = {
        id: this.nextSessionId++,
        task: name,
        index,
        worker,
        start: now,
        lastUpdate: now,
        busy: true,
        settledAt: Number.POSITIVE_INFINITY,
      };
      this.sessions.set(session.id, session);
      worker.current += 1;
      const call = await this.call(worker, "start_sample", { index, session_id: session.id }, "long");
      session.busy = false;
      session.settledAt = Date.now();
      if (call.kind === "unreachable" || call.kind === "timeout") {
        this.drop(session);
        if (call.kind === "unreachable") this.registry.markDead(worker, `start_sample failed: ${describeCall(call)}`);
        else this.cancelOnWorker(worker, session.id);
        continue;
      }
      if (call.kind === "http") {
        this.drop(session);
        if (call.status === 406) {
          // Our count was behind the worker's; treat it as full until the next reconciliation.
          worker.current = Math.max(worker.current, worker.capacity);
          continue;
        }
        throw new HttpError(passThroughStatus(call.status), `worker ${worker.id}: ${errorOf(call.body)}`);
      }
      const routing = call.kind === "ok" ? routingOf(call.body) : call.why;
      if (typeof routing === "string" || call.kind !== "ok") {
        this.drop(session);
        this.cancelOnWorker(worker, session.id);
        throw new HttpError(502, `worker ${worker.id} answered start_sample with an invalid body: ${routing}`);
      }
      this.registry.sawAlive(worker);
      worker.episodes += 1;
      if (routing.finish || routing.status !== "running") this.drop(session);
      return { sessionId: session.id, body: call.body };
    }
  }

  /** Relays one turn to the session's worker. 404 unknown session, 409 a turn already running. */
  async interact(sessionId: number, messages: z.infer<typeof ControllerInteract>["messages"]): Promise<TurnResult> {
    const session = this.sessions.get(sessionId);
    if (!session)
      throw new HttpError(404, `unknown session ${sessionId} (never started, finished, cancelled or expired)`);
    if (session.busy) throw new HttpError(409, `session ${sessionId} is still running the previous turn`);
    const worker = session.worker;
    if (worker.state === "DEAD" || !this.registry.isRegistered(worker)) {
      this.drop(session);
      return lost("worker_lost", `the worker of session ${sessionId} (${worker.address}) is dead`);
    }
    session.busy = true;
    session.lastUpdate = Date.now();
    const call = await this.call(worker, "interact", { session_id: sessionId, messages }, "long");
    session.busy = false;
    session.settledAt = Date.now();
    session.lastUpdate = session.settledAt;
    if (!this.sessions.has(sessionId)) {
      // Cancelled while the turn ran: the worker aborted it; report what it said if it is valid.
      if (call.kind === "ok" && typeof routingOf(call.body) !== "string") return { kind: "reply", body: call.body };
      return lost("session_lost", `session ${sessionId} was cancelled during the turn`);
    }
    if (call.kind === "unreachable") {
      this.registry.markDead(worker, `interact failed: ${describeCall(call)}`);
      this.drop(session);
      return lost("worker_lost", `the worker of session ${sessionId} (${worker.address}) is unreachable`);
    }
    if (call.kind === "timeout") {
      this.drop(session);
      this.cancelOnWorker(worker, sessionId);
      return lost("worker_timeout", `the worker did not answer within ${this.options.workerTimeoutMs} ms`);
    }
    if (call.kind === "http") {
      if (call.status === 404) {
        this.drop(session);
        return lost("session_lost", `the worker no longer holds session ${sessionId}`);
      }
      if (call.status >= 500) {
        this.drop(session);
        this.cancelOnWorker(worker, sessionId);
        return lost("worker_error", `worker error: ${errorOf(call.body)}`);
      }
      throw new HttpError(passThroughStatus(call.status), errorOf(call.body));
    }
    if (call.kind === "ok") this.registry.sawAlive(worker);
    const routing = call.kind === "ok" ? routingOf(call.body) : call.why;
    if (typeof routing === "string" || call.kind !== "ok") {
      this.drop(session);
      this.cancelOnWorker(worker, sessionId);
      return lost("worker_error", `invalid interact answer from worker: ${routing}`);
    }
    if (routing.finish || routing.status !== "running") this.drop(session);
    return { kind: "reply", body: call.body };
  }

  /** Ends a session (idempotent): drops it here and asks its worker to cancel it. */
  async cancel(sessionId: number): Promise<boolean> {
    const session = this.sessions.get(sessionId);
    if (!session) return false;
    this.drop(session);
    const call = await this.call(session.worker, "cancel", { session_id: sessionId }, "short");
    if (call.kind === "unreachable") this.registry.markDead(session.worker, `cancel failed: ${describeCall(call)}`);
    return true;
  }

  /** Ends every session, here and on every registered worker; resolves with how many there were. */
  async cancelAll(): Promise<number> {
    const count = this.sessions.size;
    const workers = this.registry.allWorkers();
    for (const session of [...this.sessions.values()]) this.drop(session);
    await Promise.all(workers.map((w) => this.call(w, "cancel_all", {}, "short")));
    return count;
  }

  /** Compares the worker's sessions with ours: drops sessions it lost, cancels ones we do not know. */
  async reconcile(worker: WorkerRecord): Promise<boolean> {
    if (worker.reconciling) return worker.state === "ALIVE";
    worker.reconciling = true;
    const askedAt = Date.now();
    try {
      const call = await this.call(worker, "get_sessions", undefined, "short");
      if (call.kind === "timeout") {
        // Slow is not dead: keep the worker's state and try again on a later heartbeat.
        this.options.log.warn(
          { workerId: worker.id, address: worker.address },
          "get_sessions timed out; reconciliation skipped",
        );
        return false;
      }
      if (call.kind !== "ok") {
        this.registry.markDead(worker, `get_sessions failed (${describeCall(call)})`);
        return false;
      }
      const parsed = WorkerSessions.safeParse(safeJson(call.body));
      if (!parsed.success) {
        this.registry.markDead(worker, "get_sessions answered an invalid body");
        return false;
      }
      const held = new Set(Object.keys(parsed.data).map(Number));
      let pinned = 0;
      for (const session of this.sessions.values()) {
        if (session.worker !== worker) continue;
        // Only a session whose last call returned before we asked can be judged: the worker
        // registers a session before answering start_sample, so it must have listed it.
        if (!held.has(session.id) && !session.busy && session.settledAt < askedAt) {
          this.options.log.warn(
            { sessionId: session.id, workerId: worker.id },
            "worker no longer holds session; dropped",
          );
          this.drop(session);
        } else pinned += 1;
      }
      worker.current = pinned;
      for (const id of held) {
        if (this.sessions.get(id)?.worker !== worker) {
          this.options.log.info({ sessionId: id, workerId: worker.id }, "cancelling orphan session on worker");
          this.cancelOnWorker(worker, id);
        }
      }
      worker.lastReconcile = Date.now();
      return true;
    } finally {
      worker.reconciling = false;
    }
  }

  /** Drops (here only) every session pinned to `worker`: it is gone. */
  dropAllOf(worker: WorkerRecord): void {
    for (const session of this.sessions.values()) if (session.worker === worker) this.drop(session);
  }

  /** Cancels sessions with no turn for `sessionIdleTimeoutMs`, here and on their workers. */
  expireIdle(now: number): void {
    const cutoff = now - this.options.sessionIdleTimeoutMs;
    for (const session of this.sessions.values()) {
      if (!session.busy && session.lastUpdate < cutoff) {
        this.options.log.info({ sessionId: session.id, task: session.task }, "session idle too long; cancelled");
        this.drop(session);
        this.cancelOnWorker(session.worker, session.id);
      }
    }
  }

  list(): Record<string, SessionInfo> {
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

  private call(worker: WorkerRecord, path: string, body: unknown, timeout: "long" | "short"): Promise<WorkerCall> {
    const ms = timeout === "long" ? this.options.workerTimeoutMs : this.options.shortTimeoutMs;
    return this.calls.call(worker.target, path, body, ms);
  }

  /** Fire and forget: the session is already gone here; the worker should stop it too. */
  private cancelOnWorker(worker: WorkerRecord, sessionId: number): void {
    void this.call(worker, "cancel", { session_id: sessionId }, "short");
  }

  private drop(session: Session): void {
    if (this.sessions.get(session.id) !== session) return;
    this.sessions.delete(session.id);
    session.worker.current = Math.max(0, session.worker.current - 1);
  }
}

function lost(reason: LostReason, error: string): TurnResult {
  return { kind: "lost", reason, error };
}

/** The routing fields of an `ok` answer, or why they cannot be read. */
function routingOf(body: Buffer): RoutingFields | string {
  const value = safeJson(body);
  if (value === undefined) return "not valid JSON";
  const parsed = RoutingFields.safeParse(value);
  if (parsed.success) return parsed.data;
  return issuesOf(parsed.error)
    .map((i) => `${i.path || "(root)"}: ${i.message}`)
    .join("; ");
}

function safeJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString("utf8"));
  } catch {
    return undefined;
  }
}

function errorOf(body: Buffer): string {
  const parsed = ErrorBody.safeParse(safeJson(body));
  return parsed.success ? parsed.data.error : body.toString("utf8").slice(0, 300);
}

function passThroughStatus(status: number): ContentfulStatusCode {
  return (status >= 400 && status <= 599 ? status : 502) as ContentfulStatusCode;
}
