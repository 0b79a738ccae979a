import { Worker } from "node:worker_threads";
import { z } from "zod";
import { DEFAULT_IDLE_MS, DEFAULT_MAX_IDLE, IdlePool } from "../../shared/env/idlePool.ts";

/**
 * SQLite sessions backed by sql.js worker threads. A statement that runs past its time limit is
 * stopped by terminating its worker (a few milliseconds); the session then rebuilds its database
 * on a fresh worker by replaying what ran before, so the agent keeps its earlier changes.
 */

const WORKER_URL = new URL("./sqlWorker.mjs", import.meta.url);

const SqlValue = z.union([z.string(), z.number(), z.null(), z.instanceof(Uint8Array)]);
export type SqlValue = z.infer<typeof SqlValue>;

/**
 * One statement's result: the first rows (up to the request's maxRows and result bytes) and how
 * many there were; `truncatedCells` cells were cut to the cell cap, and `byteLimited` says rows
 * were left out for the result cap.
 */
const ResultSet = z.object({
  columns: z.array(z.string()),
  values: z.array(z.array(SqlValue)),
  total: z.number(),
  truncatedCells: z.number(),
  byteLimited: z.boolean(),
});
export type ResultSet = z.infer<typeof ResultSet>;

const WorkerReply = z.discriminatedUnion("ok", [
  z.object({ id: z.number(), ok: z.literal(true), results: z.array(ResultSet), changes: z.number() }),
  z.object({ id: z.number(), ok: z.literal(false), error: z.string() }),
]);
type WorkerReply = z.infer<typeof WorkerReply>;

/** How much of a result crosses from the SQL thread: rows, bytes per cell, bytes in all. */
export interface ResultCaps {
  readonly maxRows: number;
  readonly maxCellBytes: number;
  readonly maxResultBytes: number;
}

/** No cap: the judge reads whole tables and reference results. */
const UNCAPPED: ResultCaps = {
  maxRows: Number.MAX_SAFE_INTEGER,
  maxCellBytes: Number.MAX_SAFE_INTEGER,
  maxResultBytes: Number.MAX_SAFE_INTEGER,
};

type WorkerRequest = { op: "reset"; sql: string } | ({ op: "exec"; sql: string } & ResultCaps) | { op: "close" };

/** What one statement (or script) did. */
export type ExecOutcome =
  | { readonly kind: "ok"; readonly results: ResultSet[]; readonly changes: number }
  | { readonly kind: "error"; readonly message: string }
  | { readonly kind: "timeout"; readonly limitMs: number };

/** One sql.js worker thread; requests are answered in order. */
class SqlWorker {
  private nextId = 0;
  private readonly pending = new Map<number, (reply: WorkerReply) => void>();
  private failure: Error | undefined;

  private constructor(private readonly worker: Worker) {
    worker.on("message", (raw: unknown) => {
      const reply = WorkerReply.safeParse(raw);
      if (!reply.success) return;
      const resolve = this.pending.get(reply.data.id);
      this.pending.delete(reply.data.id);
      resolve?.(reply.data);
    });
    const fail = (error: Error) => {
      this.failure = error;
      for (const resolve of this.pending.values())
        resolve({ id: -1, ok: false, error: `SQL worker stopped: ${error.message}` });
      this.pending.clear();
    };
    worker.on("error", fail);
    worker.on("exit", (code) => fail(new Error(`exited with code ${code}`)));
    // Idle workers must not keep the process alive; a request in flight holds a timer instead.
    worker.unref();
  }

  static async spawn(): Promise<SqlWorker> {
    const worker = new Worker(WORKER_URL, { resourceLimits: { maxOldGenerationSizeMb: 256 } });
    await new Promise<void>((resolve, reject) => {
      worker.once("message", () => resolve());
      worker.once("error", reject);
    });
    return new SqlWorker(worker);
  }

  get healthy(): boolean {
    return this.failure === undefined;
  }

  /** Sends one request; resolves "timeout" (after killing the thread) if it takes longer than `limitMs`. */
  request(message: WorkerRequest, limitMs: number, signal?: AbortSignal): Promise<WorkerReply | "timeout"> {
    if (this.failure)
      return Promise.resolve({ id: -1, ok: false, error: `SQL worker stopped: ${this.failure.message}` });
    const id = this.nextId++;
    return new Promise((resolve) => {
      const onAbort = () => {
        clearTimeout(timer);
        void this.terminate();
        resolve({ id, ok: false, error: "cancelled" });
      };
      const timer = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        void this.terminate();
        resolve("timeout");
      }, limitMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.pending.set(id, (reply) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        resolve(reply);
      });
      this.worker.postMessage({ id, ...message });
    });
  }

  async terminate(): Promise<void> {
    this.failure ??= new Error("terminated");
    await this.worker.terminate();
  }
}

/**
 * Warm workers for the next episodes, as many as the sessions last used at once: each spawn costs a
 * thread and a wasm start-up.
 */
class WorkerPool {
  private readonly idle = new IdlePool<SqlWorker>({
    maxIdle: DEFAULT_MAX_IDLE,
    idleMs: DEFAULT_IDLE_MS,
    isAlive: (worker) => worker.healthy,
    discard: (worker) => void worker.terminate(),
  });

  async acquire(): Promise<SqlWorker> {
    return this.idle.take() ?? SqlWorker.spawn();
  }

  release(worker: SqlWorker): void {
    this.idle.put(worker);
  }
}

const pool = new WorkerPool();

/** Time allowed for rebuilding a database (setup script plus replayed statements). */
const REBUILD_LIMIT_MS = 30_000;

/**
 * One episode's database: built from `setupSql`, changed only by `exec`. Statements past
 * `timeoutMs` are stopped and leave the database as it was before them.
 * @example const s = await SqlSession.open("CREATE TABLE t(a); INSERT INTO t VALUES (1);", 2000);
 */
export class SqlSession {
  /** Statements that ran to the end (with or without error), replayed after a timeout. */
  private readonly history: string[] = [];
  private worker: SqlWorker | undefined;
  private closed = false;

  private constructor(
    private readonly setupSql: string,
    readonly timeoutMs: number,
  ) {}

  static async open(setupSql: string, timeoutMs: number): Promise<SqlSession> {
    const session = new SqlSession(setupSql, timeoutMs);
    await session.ensureWorker();
    return session;
  }

  /** Runs SQL text (one statement or several separated by `;`), keeping of each result what `caps` allow. */
  async exec(sql: string, signal?: AbortSignal, caps: ResultCaps = UNCAPPED): Promise<ExecOutcome> {
    const worker = await this.ensureWorker();
    const reply = await worker.request({ op: "exec", sql, ...caps }, this.timeoutMs, signal);
    if (reply === "timeout") {
      this.worker = undefined;
      return { kind: "timeout", limitMs: this.timeoutMs };
    }
    if (signal?.aborted) throw new Error("cancelled");
    if (!worker.healthy) {
      // The engine died under this statement (e.g. out of memory): drop it, rebuild on next use.
      this.worker = undefined;
      return {
        kind: "error",
        message: `${reply.ok ? "the SQL engine stopped" : reply.error}; the statement changed nothing`,
      };
    }
    this.history.push(sql);
    if (!reply.ok) return { kind: "error", message: reply.error };
    return { kind: "ok", results: reply.results, changes: reply.changes };
  }

  /** Every row of `table` (null when the table cannot be read, e.g. it was dropped). */
  async tableRows(table: string): Promise<SqlValue[][] | null> {
    const worker = await this.ensureWorker();
    const reply = await worker.request({ op: "exec", sql: `SELECT * FROM "${table}"`, ...UNCAPPED }, REBUILD_LIMIT_MS);
    if (reply === "timeout" || !reply.ok) return null;
    return reply.results[0]?.values ?? [];
  }

  /** Frees the database and hands the worker back to the pool. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const worker = this.worker;
    this.worker = undefined;
    if (!worker) return;
    // No need to wait for the reply: the worker handles messages in order, so the next episode's
    // reset comes after this close; a worker that fails to close stops being healthy and is dropped.
    void worker.request({ op: "close" }, REBUILD_LIMIT_MS);
    pool.release(worker);
  }

  private async ensureWorker(): Promise<SqlWorker> {
    if (this.closed) throw new Error("the SQL session is closed");
    if (this.worker?.healthy) return this.worker;
    const worker = await pool.acquire();
    // Replayed statements may fail again exactly as they did the first time; only a failing
    // setup script is an error.
    const setup = await worker.request({ op: "reset", sql: this.setupSql }, REBUILD_LIMIT_MS);
    if (setup === "timeout" || !setup.ok) {
      await worker.terminate();
      throw new Error(`could not build the database: ${setup === "timeout" ? "timed out" : setup.error}`);
    }
    for (const sql of this.history)
      await worker.request({ op: "exec", sql, ...UNCAPPED, maxRows: 0 }, REBUILD_LIMIT_MS);
    this.worker = worker;
    return worker;
  }
}
