import { HttpError } from "../../shared/http.ts";
import type { Logger } from "../../shared/log.ts";
import type { Heartbeat, ListWorkersResponse, WorkerState } from "../../shared/protocol/envApi.ts";
import { checkRegistration, type RegistrationLimits } from "./registration.ts";
import { type WorkerTarget, workerTarget } from "./workerCalls.ts";

/**
 * The controller's registry of tasks and their workers, kept from heartbeats.
 *
 * Worker states: ALIVE (heartbeat fresh), COMA (last sign of life older than
 * `heartbeatTimeoutMs`: not routed to), DEAD (a call to it failed). A worker silent for
 * `forgetAfterMs` is forgotten; a task whose last worker is forgotten is forgotten too. The
 * registry never calls a worker itself: session-table reconciliation and dropping a forgotten
 * worker's sessions are the session table's, reached through {@link RegistryHooks}.
 */
export interface WorkerRecord {
  readonly id: number;
  readonly task: string;
  readonly address: string;
  readonly target: WorkerTarget;
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

export interface TaskRecord {
  indices: number[];
  indexSet: Set<number>;
  readonly workers: Map<number, WorkerRecord>;
  /** start_sample calls answered 406: the pool manager reads it as unmet demand. */
  rejected: number;
}

/** What the registry asks of the session table. */
export interface RegistryHooks {
  /** Compares the worker's session table with ours; true when it answered (it may be ALIVE). */
  reconcile(worker: WorkerRecord): Promise<boolean>;
  /** The worker is forgotten: its sessions end. */
  forgotten(worker: WorkerRecord): void;
}

export interface RegistryOptions {
  readonly heartbeatTimeoutMs: number;
  readonly forgetAfterMs: number;
  readonly reconcileIntervalMs: number;
  readonly limits: RegistrationLimits;
  readonly log: Logger;
}

export class Registry {
  private readonly tasks = new Map<string, TaskRecord>();
  private nextWorkerId = 0;

  constructor(
    private readonly options: RegistryOptions,
    private readonly hooks: RegistryHooks,
  ) {}

  /** Registers or refreshes the worker a heartbeat describes; throws HttpError 400/409 when it cannot join. */
  async receiveHeartbeat(beat: Heartbeat): Promise<{ worker_id: number; status: WorkerState }> {
    const now = Date.now();
    let task = this.tasks.get(beat.name);
    const existing = task ? [...task.workers.values()].find((w) => w.address === beat.address) : undefined;
    checkRegistration(
      beat,
      {
        taskKnown: task !== undefined,
        workerKnown: existing !== undefined,
        tasks: this.tasks.size,
        workers: this.workerCount(),
      },
      this.options.limits,
    );
    const others = task ? task.workers.size - (existing ? 1 : 0) : 0;
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
        if (w.address === beat.address) this.forget(w, "re-registered for another task");
    }
    if (!existing) {
      const worker: WorkerRecord = {
        id: this.nextWorkerId++,
        task: beat.name,
        address: beat.address,
        target: workerTarget(beat.address),
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
      this.options.log.info({ task: beat.name, address: beat.address, workerId: worker.id }, "worker registered");
      // A worker that outlived a controller restart may hold sessions nobody will finish.
      void this.hooks.reconcile(worker);
      return { worker_id: worker.id, status: worker.state };
    }
    existing.lastVisit = now;
    existing.capacity = beat.concurrency;
    // Draining is one-way: a heartbeat sent before a drain reached the worker does not undo it.
    existing.draining ||= beat.draining ?? false;
    existing.episodes = Math.max(existing.episodes, beat.episodes ?? 0);
    if (existing.state !== "ALIVE") {
      // Back from COMA/DEAD: only route to it again once its session table is known.
      if (await this.hooks.reconcile(existing)) {
        existing.state = "ALIVE";
        this.options.log.info({ task: beat.name, address: beat.address }, "worker alive again");
      }
    } else if (now - existing.lastReconcile >= this.options.reconcileIntervalMs) {
      void this.hooks.reconcile(existing);
    }
    return { worker_id: existing.id, status: existing.state };
  }

  markDead(worker: WorkerRecord, why: string): void {
    if (worker.state !== "DEAD")
      this.options.log.warn({ workerId: worker.id, address: worker.address, why }, "worker DEAD");
    worker.state = "DEAD";
  }

  /** A worker that answered is alive, even if its heartbeats queue behind our own load. */
  sawAlive(worker: WorkerRecord): void {
    worker.lastVisit = Math.max(worker.lastVisit, Date.now());
  }

  /** True while `worker` is still registered (not forgotten or replaced). */
  isRegistered(worker: WorkerRecord): boolean {
    return this.tasks.get(worker.task)?.workers.get(worker.id) === worker;
  }

  /** Marks stale workers COMA and forgets silent ones. */
  sweep(now: number): void {
    for (const task of this.tasks.values()) {
      for (const worker of task.workers.values()) {
        this.refreshState(worker, now);
        if (now - worker.lastVisit > this.options.forgetAfterMs) this.forget(worker, "no heartbeat");
      }
    }
  }

  taskOf(name: string): TaskRecord {
    const task = this.tasks.get(name);
    if (!task) {
      const known = [...this.tasks.keys()].join(", ") || "none yet";
      throw new HttpError(404, `name: no worker has registered task "${name}" (registered: ${known})`);
    }
    return task;
  }

  taskNames(): string[] {
    return [...this.tasks.keys()];
  }

  allWorkers(): WorkerRecord[] {
    return [...this.tasks.values()].flatMap((t) => [...t.workers.values()]);
  }

  /** The ALIVE, non-draining worker of `task` with the most free slots, skipping `exclude`. */
  pickWorker(task: TaskRecord, exclude: ReadonlySet<number>): WorkerRecord | undefined {
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

  private forget(worker: WorkerRecord, why: string): void {
    this.options.log.warn({ workerId: worker.id, address: worker.address, why }, "worker forgotten");
    const task = this.tasks.get(worker.task);
    task?.workers.delete(worker.id);
    // A task nobody serves any more is forgotten too, so stale names and indices do not pile up.
    if (task && task.workers.size === 0) this.tasks.delete(worker.task);
    this.hooks.forgotten(worker);
  }

  private workerCount(): number {
    let count = 0;
    for (const task of this.tasks.values()) count += task.workers.size;
    return count;
  }

  private refreshState(worker: WorkerRecord, now: number): void {
    if (worker.state === "ALIVE" && now - worker.lastVisit > this.options.heartbeatTimeoutMs) {
      worker.state = "COMA";
      this.options.log.warn({ workerId: worker.id, address: worker.address }, "worker heartbeat stale: COMA");
    }
  }
}

function sameIndices(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
