/**
 * The embedded transport: every queue lives in one SQLite database (`<localDir>/queues.sqlite`,
 * WAL mode, one connection per process, short IMMEDIATE transactions) and every object store is a
 * directory (`<localDir>/objects/<store>/`) written with temp file + fsync + atomic rename.
 * Several processes on one machine may share a `localDir`; everything survives a process crash.
 */
import { randomUUID } from "node:crypto";
import { EventEmitter } from "node:events";
import { constants, type Dirent, type FSWatcher, mkdirSync, watch } from "node:fs";
import { link, mkdir, open, readdir, readFile, rename, rmdir, stat, unlink } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import Database from "libsql";
import { ReceiptHandleError, TransportError } from "./errors.ts";
import {
  type DeadLetter,
  MAX_RECEIVE_COUNT_EXCEEDED,
  type ObjectInfo,
  type ObjectStore,
  type Queue,
  type QueueName,
  type ReceivedMessage,
  type ReceiveOptions,
  type Transport,
} from "./types.ts";
import {
  assertValidBodies,
  assertValidObjectKey,
  assertValidPrefix,
  normalizeReason,
  parseReceiveOptions,
  parseVisibilityTimeout,
} from "./validate.ts";

/**
 * How often a long-polling receive looks again for messages sent by other processes where the
 * platform cannot watch the database's folder for their commits.
 */
const POLL_INTERVAL_MS = 25;
/**
 * Where it can, a long poll sleeps until another process commits (the folder watch), or until the
 * queue's next in-flight message becomes visible again, and at most this long: a safety net, not
 * the way messages are seen.
 */
const WATCHED_POLL_INTERVAL_MS = 500;
/** A temp file untouched this long belongs to a writer that died; a live write never takes an hour. */
const STALE_TEMP_MS = 60 * 60 * 1000;

/** Settings of the local transport (the subset of TransportConfig it uses). */
export interface LocalTransportOptions {
  /** Folder holding `queues.sqlite` and `objects/`; created when missing. */
  readonly localDir: string;
  /** Deliveries before a message moves to the dead-letter table. */
  readonly maxReceiveCount: number;
  /** Visibility timeout of a receive that does not give one, seconds. */
  readonly visibilityTimeoutSeconds: number;
}

/**
 * A prepared statement with the types of its parameters and rows. The driver types every row as
 * `unknown`; these statements read only the tables this file creates, so their rows are what the
 * SELECT names (no other writer exists to validate against).
 */
interface TypedStatement<Params extends unknown[], Row> {
  run(...params: Params): { changes: number };
  get(...params: Params): Row | undefined;
  all(...params: Params): Row[];
}

function prepare<Params extends unknown[], Row = never>(
  db: Database.Database,
  sql: string,
): TypedStatement<Params, Row> {
  return db.prepare(sql) as unknown as TypedStatement<Params, Row>;
}

interface MessageRow {
  seq: number;
  id: string;
  body: string;
  receive_count: number;
}

/**
 * One process's connection to the shared queue database. All queues of a transport share it. A
 * long-polling receive sleeps until the database changes: a send in this process wakes it at once,
 * a commit of another process through a watch on the database's folder (its WAL file grows), so
 * an idle consumer costs next to nothing; without such a watch it looks every POLL_INTERVAL_MS.
 */
export class LocalQueueDatabase {
  readonly db: Database.Database;
  /** Emits `changed` after a commit of this process that made messages visible, or one seen in the folder. */
  private readonly events = new EventEmitter();
  /** Counts the changes seen, so a receive can tell whether one came while it looked. */
  private changes = 0;
  private watcher: FSWatcher | undefined;
  private closed = false;

  constructor(readonly path: string) {
    mkdirSync(dirname(path), { recursive: true });
    this.db = new Database(path);
    // busy_timeout first: switching to WAL needs a lock another process may hold.
    this.db.pragma("busy_timeout = 10000");
    this.db.pragma("journal_mode = WAL");
    // NORMAL in WAL mode: a committed transaction survives any process crash; only an OS crash or
    // power loss can lose the last few commits (at-least-once consumers tolerate a redelivery).
    this.db.pragma("synchronous = NORMAL");
    this.db.exec(`
      CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        id TEXT NOT NULL UNIQUE,
        body TEXT NOT NULL,
        sent_at INTEGER NOT NULL,
        visible_at INTEGER NOT NULL,
        receive_count INTEGER NOT NULL DEFAULT 0,
        receipt TEXT UNIQUE
      );
      CREATE INDEX IF NOT EXISTS messages_by_queue ON messages (queue, visible_at);
      CREATE TABLE IF NOT EXISTS dead_letters (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        queue TEXT NOT NULL,
        id TEXT NOT NULL,
        body TEXT NOT NULL,
        receive_count INTEGER NOT NULL,
        reason TEXT NOT NULL,
        sent_at INTEGER NOT NULL,
        dead_at INTEGER NOT NULL
      );
      CREATE INDEX IF NOT EXISTS dead_letters_by_queue ON dead_letters (queue, seq);
    `);
    this.events.setMaxListeners(0);
    this.watcher = watchCommits(
      path,
      () => this.changed(),
      () => {
        // the watch failed: back to looking every POLL_INTERVAL_MS
        this.watcher = undefined;
      },
    );
  }

  /** True when other processes' commits wake this process's long polls (else they poll). */
  get watchesCommits(): boolean {
    return this.watcher !== undefined;
  }

  /** Wakes this process's long polls: messages may have become visible. */
  changed(): void {
    this.changes += 1;
    this.events.emit("changed");
  }

  /** How many changes were seen so far: pass it to {@link waitForChange} after looking. */
  get changeCount(): number {
    return this.changes;
  }

  /** Resolves after `ms`, or at once when a change came since `seen` (or comes meanwhile), or on close. */
  waitForChange(seen: number, ms: number): Promise<void> {
    if (this.changes !== seen || this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.events.off("changed", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.events.once("changed", done);
    });
  }

  /** True once close() ran; pending long polls then return empty. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** Closes the connection and wakes this process's long polls. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.watcher?.close();
    this.changed();
    this.db.close();
  }
}

/** A named queue in a LocalQueueDatabase, with SQS semantics (see the Queue interface). */
export class LocalQueue implements Queue {
  private readonly insert;
  private readonly anyReady;
  private readonly nextVisible;
  private readonly selectReady;
  private readonly markReceived;
  private readonly moveToDeadLetters;
  private readonly deleteById;
  private readonly selectByReceipt;
  private readonly deleteByReceipt;
  private readonly setVisibility;
  private readonly releaseForRetry;
  private readonly countDepth;
  private readonly selectDeadLetters;

  constructor(
    private readonly database: LocalQueueDatabase,
    readonly name: string,
    private readonly options: Pick<LocalTransportOptions, "maxReceiveCount" | "visibilityTimeoutSeconds">,
  ) {
    const db = database.db;
    this.insert = prepare<[{ queue: string; id: string; body: string; now: number }]>(
      db,
      "INSERT INTO messages (queue, id, body, sent_at, visible_at) VALUES (@queue, @id, @body, @now, @now)",
    );
    this.anyReady = prepare<[string, number], { one: number }>(
      db,
      "SELECT 1 AS one FROM messages WHERE queue = ? AND visible_at <= ? LIMIT 1",
    );
    this.nextVisible = prepare<[string, number], { at: number | null }>(
      db,
      "SELECT MIN(visible_at) AS at FROM messages WHERE queue = ? AND visible_at > ?",
    );
    this.selectReady = prepare<[string, number, number, number], MessageRow>(
      db,
      "SELECT seq, id, body, receive_count FROM messages WHERE queue = ? AND visible_at <= ? AND seq > ? ORDER BY seq LIMIT ?",
    );
    this.markReceived = prepare<[number, string, number]>(
      db,
      "UPDATE messages SET visible_at = ?, receipt = ?, receive_count = receive_count + 1 WHERE seq = ?",
    );
    this.moveToDeadLetters = prepare<[{ seq: number; reason: string; now: number }]>(
      db,
      `INSERT INTO dead_letters (queue, id, body, receive_count, reason, sent_at, dead_at)
       SELECT queue, id, body, receive_count, @reason, sent_at, @now FROM messages WHERE seq = @seq`,
    );
    this.deleteById = prepare<[number]>(db, "DELETE FROM messages WHERE seq = ?");
    this.selectByReceipt = prepare<[string, string], MessageRow>(
      db,
      "SELECT seq, id, body, receive_count FROM messages WHERE queue = ? AND receipt = ?",
    );
    this.deleteByReceipt = prepare<[string, string]>(db, "DELETE FROM messages WHERE queue = ? AND receipt = ?");
    this.setVisibility = prepare<[number, string, string]>(
      db,
      "UPDATE messages SET visible_at = ? WHERE queue = ? AND receipt = ?",
    );
    this.releaseForRetry = prepare<[number, number]>(
      db,
      "UPDATE messages SET visible_at = ?, receipt = NULL WHERE seq = ?",
    );
    this.countDepth = prepare<[{ now: number; queue: string }], { visible: number | null; inFlight: number | null }>(
      db,
      "SELECT SUM(visible_at <= @now) AS visible, SUM(visible_at > @now) AS inFlight FROM messages WHERE queue = @queue",
    );
    this.selectDeadLetters = prepare<
      [string, number],
      { id: string; body: string; receive_count: number; reason: string }
    >(db, "SELECT id, body, receive_count, reason FROM dead_letters WHERE queue = ? ORDER BY seq LIMIT ?");
  }

  async send(body: string): Promise<string> {
    const [id] = await this.sendBatch([body]);
    return id!;
  }

  async sendBatch(bodies: readonly string[]): Promise<string[]> {
    assertValidBodies(bodies);
    if (bodies.length === 0) return [];
    const now = Date.now();
    const ids = bodies.map(() => randomUUID());
    this.database.db.transaction(() => {
      for (const [index, body] of bodies.entries()) this.insert.run({ queue: this.name, id: ids[index]!, body, now });
    })();
    this.database.changed();
    return ids;
  }

  async receive(options?: ReceiveOptions): Promise<ReceivedMessage[]> {
    const parsed = parseReceiveOptions(options);
    const visibilityMs = (parsed.visibilityTimeoutSeconds ?? this.options.visibilityTimeoutSeconds) * 1000;
    const deadline = Date.now() + parsed.waitSeconds * 1000;
    for (;;) {
      if (this.database.isClosed) return [];
      // Noted before looking: a change that comes while we look ends the wait at once.
      const seen = this.database.changeCount;
      const received = this.receiveNow(parsed.maxMessages, visibilityMs);
      const remaining = deadline - Date.now();
      if (received.length > 0 || remaining <= 0) return received;
      await this.database.waitForChange(seen, Math.min(remaining, this.nextLookMs()));
    }
  }

  /** How long an empty long poll may sleep before it looks again, if no change wakes it first. */
  private nextLookMs(): number {
    if (!this.database.watchesCommits) return POLL_INTERVAL_MS;
    // A message in flight becomes visible again by time alone, which no commit announces.
    const now = Date.now();
    const at = this.nextVisible.get(this.name, now)?.at;
    return Math.max(1, Math.min(WATCHED_POLL_INTERVAL_MS, at == null ? Infinity : at - now));
  }

  /** One attempt, in one IMMEDIATE transaction so two processes never take the same delivery. */
  private receiveNow(maxMessages: number, visibilityMs: number): ReceivedMessage[] {
    // Idle long polls only read: the write lock is taken only when there is something to take.
    if (!this.anyReady.get(this.name, Date.now())) return [];
    return this.database.db
      .transaction(() => {
        const now = Date.now();
        const out: ReceivedMessage[] = [];
        // Walk forward by seq: a message taken with visibility 0 is visible again at once and must
        // not be taken twice by the same receive.
        let after = 0;
        for (;;) {
          const rows = this.selectReady.all(this.name, now, after, maxMessages - out.length);
          if (rows.length === 0) return out;
          for (const row of rows) {
            after = row.seq;
            if (row.receive_count >= this.options.maxReceiveCount) {
              // Deliveries ran out without a delete or a fail that dead-lettered it: consumers crashed or timed out.
              this.moveToDeadLetters.run({ seq: row.seq, reason: MAX_RECEIVE_COUNT_EXCEEDED, now });
              this.deleteById.run(row.seq);
              continue;
            }
            const receiptHandle = randomUUID();
            this.markReceived.run(now + visibilityMs, receiptHandle, row.seq);
            out.push({ id: row.id, receiptHandle, body: row.body, receiveCount: row.receive_count + 1 });
          }
          if (out.length >= maxMessages) return out;
        }
      })
      .immediate();
  }

  async delete(receiptHandle: string): Promise<void> {
    // A stale handle (the message was redelivered since) matches nothing: the new delivery survives.
    this.deleteByReceipt.run(this.name, receiptHandle);
  }

  async changeVisibility(receiptHandle: string, visibilityTimeoutSeconds: number): Promise<void> {
    const seconds = parseVisibilityTimeout(visibilityTimeoutSeconds);
    const result = this.setVisibility.run(Date.now() + seconds * 1000, this.name, receiptHandle);
    if (result.changes === 0)
      throw new ReceiptHandleError(
        `queue ${this.name}: receipt handle is not in flight any more (deleted, failed or redelivered)`,
      );
    if (seconds === 0) this.database.changed();
  }

  async fail(receiptHandle: string, reason: string): Promise<void> {
    const why = normalizeReason(reason);
    const db = this.database.db;
    const released = db
      .transaction(() => {
        const row = this.selectByReceipt.get(this.name, receiptHandle);
        if (!row) return false; // stale: someone else owns the message now
        const now = Date.now();
        if (row.receive_count >= this.options.maxReceiveCount) {
          this.moveToDeadLetters.run({ seq: row.seq, reason: why, now });
          this.deleteById.run(row.seq);
          return false;
        }
        this.releaseForRetry.run(now, row.seq);
        return true;
      })
      .immediate();
    if (released) this.database.changed();
  }

  async approximateDepth(): Promise<{ visible: number; inFlight: number }> {
    const row = this.countDepth.get({ now: Date.now(), queue: this.name });
    return { visible: row?.visible ?? 0, inFlight: row?.inFlight ?? 0 };
  }

  async deadLetters(max = 100): Promise<DeadLetter[]> {
    return this.selectDeadLetters
      .all(this.name, max)
      .map((row) => ({ id: row.id, body: row.body, receiveCount: row.receive_count, reason: row.reason }));
  }

  /** No-op: the owning transport closes the shared database connection. */
  async close(): Promise<void> {}
}

/**
 * Objects as files under one directory; a key `a/b/c` is the file `<dir>/a/b/c`. Writes go to a
 * temp file in a sibling folder, are fsynced, then renamed (put) or hard-linked (putIfAbsent) into
 * place, so a reader sees either nothing or a complete object, even if the writer is killed. A
 * command that owns the folder (`agentrl sft --out DIR`; a run, through `LocalTransport.tidy`) calls
 * `removeEmptyTempDir` when done, so only DIR is left.
 */
export class LocalObjectStore implements ObjectStore {
  /** Temp files live beside, not inside, `dir`: they never show up in `list` and never clash with a key. */
  readonly tmpDir: string;

  private swept?: Promise<void>;

  constructor(readonly dir: string) {
    this.tmpDir = `${dir}.tmp`;
  }

  /** Removes temp files left by writers that were killed mid-write (old enough to be nobody's now). */
  private async sweepStaleTemps(): Promise<void> {
    const cutoff = Date.now() - STALE_TEMP_MS;
    for (const name of await readdir(this.tmpDir)) {
      const path = join(this.tmpDir, name);
      const info = await stat(path).catch(() => undefined);
      if (info && info.mtimeMs < cutoff) await unlink(path).catch(() => {});
    }
  }

  private pathOf(key: string): string {
    assertValidObjectKey(key);
    return join(this.dir, ...key.split("/"));
  }

  /** Writes `body` to a fresh temp file and fsyncs it; returns the temp path. */
  private async writeTemp(body: Uint8Array | string): Promise<string> {
    await mkdir(this.tmpDir, { recursive: true });
    this.swept ??= this.sweepStaleTemps().catch(() => {});
    await this.swept;
    const tmp = join(this.tmpDir, `${randomUUID()}.part`);
    const handle = await open(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
    try {
      await handle.writeFile(body);
      await handle.sync();
    } finally {
      await handle.close();
    }
    return tmp;
  }

  /**
   * Removes the temp folder if it is empty (a write under way keeps its file there, so it stays).
   * For the folder's only writer, when it is done: a write in another process caught between
   * making the folder and opening its file would fail.
   */
  async removeEmptyTempDir(): Promise<void> {
    await rmdir(this.tmpDir).catch(() => {});
  }

  private async prepareParent(path: string, key: string): Promise<void> {
    try {
      await mkdir(dirname(path), { recursive: true });
    } catch (error) {
      throw new TransportError(
        `cannot store ${JSON.stringify(key)} in ${this.dir}: a parent segment is already an object (${(error as Error).message})`,
        { cause: error },
      );
    }
  }

  async put(key: string, body: Uint8Array | string): Promise<void> {
    const path = this.pathOf(key);
    await this.prepareParent(path, key);
    const tmp = await this.writeTemp(body);
    try {
      await rename(tmp, path);
    } catch (error) {
      await unlink(tmp).catch(() => {});
      throw new TransportError(`cannot store ${JSON.stringify(key)}: ${(error as Error).message}`, { cause: error });
    }
    await syncDir(dirname(path));
  }

  async putIfAbsent(key: string, body: Uint8Array | string): Promise<boolean> {
    const path = this.pathOf(key);
    await this.prepareParent(path, key);
    const tmp = await this.writeTemp(body);
    try {
      // link() fails with EEXIST when the key exists: the check and the write are one atomic step.
      await link(tmp, path);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") return false;
      throw new TransportError(`cannot store ${JSON.stringify(key)}: ${(error as Error).message}`, { cause: error });
    } finally {
      await unlink(tmp).catch(() => {});
    }
    await syncDir(dirname(path));
    return true;
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    const path = this.pathOf(key);
    try {
      const data = await readFile(path);
      return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
  }

  async getText(key: string): Promise<string | undefined> {
    const data = await this.get(key);
    return data === undefined ? undefined : Buffer.from(data).toString("utf8");
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    const path = this.pathOf(key);
    try {
      const info = await stat(path);
      if (!info.isFile()) return undefined;
      return { key, size: info.size, lastModified: info.mtime };
    } catch (error) {
      if (isMissing(error)) return undefined;
      throw error;
    }
  }

  async list(prefix: string): Promise<ObjectInfo[]> {
    assertValidPrefix(prefix);
    // Walk only the deepest folder the prefix names fully; filter the rest by string prefix.
    const cut = prefix.lastIndexOf("/");
    const folderKey = cut < 0 ? "" : prefix.slice(0, cut);
    const start = folderKey === "" ? this.dir : join(this.dir, ...folderKey.split("/"));
    const out: ObjectInfo[] = [];
    await this.walk(start, folderKey, prefix, out);
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  private async walk(folder: string, folderKey: string, prefix: string, out: ObjectInfo[]): Promise<void> {
    let entries: Dirent[];
    try {
      entries = await readdir(folder, { withFileTypes: true });
    } catch (error) {
      if (isMissing(error)) return;
      throw error;
    }
    for (const entry of entries) {
      const key = folderKey === "" ? entry.name : `${folderKey}/${entry.name}`;
      if (entry.isDirectory()) {
        // Descend only where keys below could still match the prefix.
        if (`${key}/`.startsWith(prefix) || prefix.startsWith(`${key}/`))
          await this.walk(join(folder, entry.name), key, prefix, out);
      } else if (entry.isFile() && key.startsWith(prefix)) {
        try {
          const info = await stat(join(folder, entry.name));
          out.push({ key, size: info.size, lastModified: info.mtime });
        } catch (error) {
          if (!isMissing(error)) throw error; // deleted while listing: skip it
        }
      }
    }
  }

  async delete(key: string): Promise<void> {
    try {
      await unlink(this.pathOf(key));
    } catch (error) {
      if (!isMissing(error)) throw error;
    }
  }
}

/** The embedded transport: SQLite queues + directory stores under one folder. */
export class LocalTransport implements Transport {
  readonly database: LocalQueueDatabase;
  private readonly queues = new Map<string, LocalQueue>();
  private readonly stores = new Map<string, LocalObjectStore>();

  constructor(readonly options: LocalTransportOptions) {
    this.database = new LocalQueueDatabase(join(options.localDir, "queues.sqlite"));
  }

  queue(name: QueueName): Queue {
    let queue = this.queues.get(name);
    if (!queue) {
      queue = new LocalQueue(this.database, name, this.options);
      this.queues.set(name, queue);
    }
    return queue;
  }

  store(name: "trajectories" | "checkpoints"): ObjectStore {
    let store = this.stores.get(name);
    if (!store) {
      store = new LocalObjectStore(join(this.options.localDir, "objects", name));
      this.stores.set(name, store);
    }
    return store;
  }

  async tidy(): Promise<void> {
    for (const name of ["trajectories", "checkpoints"] as const) {
      await (this.store(name) as LocalObjectStore).removeEmptyTempDir();
    }
  }

  async close(): Promise<void> {
    this.database.close();
  }
}

function isMissing(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  // ENOTDIR/EISDIR: a key's parent is an object, or the key names a folder of other keys.
  return code === "ENOENT" || code === "ENOTDIR" || code === "EISDIR";
}

/** fsync a directory so a rename/link in it survives an OS crash, not only a process crash. */
async function syncDir(path: string): Promise<void> {
  const handle = await open(path, constants.O_RDONLY);
  try {
    await handle.sync();
  } catch {
    // Some filesystems refuse fsync on directories; the rename is still atomic.
  } finally {
    await handle.close();
  }
}

/**
 * Calls `onCommit` when another process may have committed to the SQLite database at `path`: a
 * watch on its folder reports writes to `<db>-wal` (each commit appends to it) and to the database
 * itself (checkpoints). Undefined where the platform cannot watch (no inotify left, no fs.watch);
 * `onEnd` hears a watch that fails later.
 */
function watchCommits(path: string, onCommit: () => void, onEnd: () => void): FSWatcher | undefined {
  const name = basename(path);
  try {
    // Not persistent: a watch must not keep a process alive that has nothing else to do.
    const watcher = watch(dirname(path), { persistent: false }, (_event, file) => {
      if (file === null || file.startsWith(name)) onCommit();
    });
    watcher.on("error", () => {
      watcher.close();
      onEnd();
    });
    return watcher;
  } catch {
    return undefined;
  }
}
