import { Worker } from "node:worker_threads";
import { z } from "zod";
import { DEFAULT_IDLE_MS, DEFAULT_MAX_IDLE, IdlePool } from "../../shared/env/idlePool.ts";

/**
 * One episode's shell: just-bash over an in-memory filesystem, run in a worker thread. Host files
 * and the network are unreachable (no OverlayFs/ReadWriteFs, no `network`, no python/js-exec).
 * just-bash stops a command at `commandTimeoutMs` itself; because that stop is cooperative and a
 * tight loop would otherwise freeze the event loop (every other session and the heartbeats), the
 * shell lives in its own thread, which is terminated outright when it overruns the cap by
 * `hardKillGraceMs`. Outputs are truncated the way AgentBench's OS task does (keep the head,
 * append a note). Threads are pooled: spawning one costs ~0.3 s of CPU, reusing one costs nothing.
 */

export interface SandboxLimits {
  /** Wall-clock cap of one bash_action (AgentBench: 30 s). */
  readonly commandTimeoutMs: number;
  /** Characters of output kept in the observation, note included. */
  readonly observationChars: number;
  /** Output a command may produce before just-bash stops it. */
  readonly maxOutputBytes: number;
  /** Bytes the virtual filesystem may hold. */
  readonly maxFileSystemBytes: number;
  /** How long past the command cap a silent shell thread lives before it is terminated. */
  readonly hardKillGraceMs: number;
}

export const DEFAULT_SANDBOX_LIMITS: SandboxLimits = {
  commandTimeoutMs: 30_000,
  observationChars: 800,
  maxOutputBytes: 1024 * 1024,
  maxFileSystemBytes: 32 * 1024 * 1024,
  hardKillGraceMs: 2_000,
};

/** AgentBench keeps 780 of 800 characters of an over-long output and appends this note. */
export const TRUNCATION_NOTE = "[truncated because the output is too long]";
const TRUNCATION_ROOM = 20;
/** Heap cap of a shell thread: a memory bomb kills that thread, not the env worker. */
const THREAD_HEAP_MB = 256;

export const SANDBOX_HOME = "/home/user";

/** Read-only view of a filesystem state, what check judges look at. */
export interface FsView {
  /** Content of a regular file, or null when there is none at `path`. */
  read(path: string): string | null;
  /** True for an existing file or directory. */
  exists(path: string): boolean;
}

/** The view of a set of files (directories are the files' ancestors plus `dirs`). */
export function viewOf(files: Readonly<Record<string, string>>, dirs: readonly string[] = []): FsView {
  const directories = new Set(dirs);
  for (const path of Object.keys(files)) {
    for (let at = path.lastIndexOf("/"); at > 0; at = path.lastIndexOf("/", at - 1)) directories.add(path.slice(0, at));
  }
  directories.add("/");
  return {
    read: (path) => (Object.hasOwn(files, path) ? (files[path] as string) : null),
    exists: (path) => Object.hasOwn(files, path) || directories.has(path),
  };
}

const Reply = z.object({
  id: z.number().int(),
  ok: z.boolean(),
  body: z.unknown().optional(),
  error: z.string().optional(),
});
const RanBody = z.object({ type: z.literal("ran"), stdout: z.string(), stderr: z.string(), timedOut: z.boolean() });
const SnapshotBody = z.object({
  type: z.literal("snapshot"),
  files: z.record(z.string(), z.string()),
  dirs: z.array(z.string()),
});

class ShellThreadLost extends Error {
  override readonly name = "ShellThreadLost";
}

const WORKER_URL = new URL("./shellWorker.mjs", import.meta.url);

/** Starts the thread that hosts a sandbox (the real one runs shellWorker.mjs). */
export type ShellThreadSpawner = () => Worker;

const spawnShellWorker: ShellThreadSpawner = () =>
  new Worker(WORKER_URL, { resourceLimits: { maxOldGenerationSizeMb: THREAD_HEAP_MB } });

/** One worker thread and its request/reply bookkeeping. */
class ShellThread {
  private readonly worker: Worker;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (body: unknown) => void; reject: (error: Error) => void }>();
  private lostReason: Error | undefined;

  constructor(spawn: ShellThreadSpawner) {
    this.worker = spawn();
    this.worker.unref();
    this.worker.on("message", (raw: unknown) => {
      const reply = Reply.safeParse(raw);
      if (!reply.success) return this.lose(new ShellThreadLost("the shell sent a malformed reply"));
      const waiter = this.pending.get(reply.data.id);
      if (!waiter) return;
      this.pending.delete(reply.data.id);
      if (this.pending.size === 0) this.worker.unref();
      if (reply.data.ok) waiter.resolve(reply.data.body);
      else waiter.reject(new Error(reply.data.error ?? "the shell thread failed"));
    });
    this.worker.on("error", (error) => this.lose(new ShellThreadLost(`the shell crashed (${error.message})`)));
    this.worker.on("exit", (code) => this.lose(new ShellThreadLost(`the shell exited unexpectedly (code ${code})`)));
  }

  get alive(): boolean {
    return this.lostReason === undefined;
  }

  /** Sends one request; rejects with ShellThreadLost when the thread dies or overruns `timeoutMs`. */
  request(message: Record<string, unknown>, timeoutMs: number): Promise<unknown> {
    if (this.lostReason) return Promise.reject(this.lostReason);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.lose(new ShellThreadLost("the command did not stop within the time limit"));
      }, timeoutMs);
      this.pending.set(id, {
        resolve: (body) => {
          clearTimeout(timer);
          resolve(body);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
      this.worker.ref();
      this.worker.postMessage({ id, ...message });
    });
  }

  /** Marks the thread dead, fails its pending requests and terminates it. */
  lose(reason: Error): void {
    if (this.lostReason) return;
    this.lostReason = reason;
    for (const waiter of this.pending.values()) waiter.reject(reason);
    this.pending.clear();
    void this.worker.terminate();
  }
}

/**
 * Idle shell threads kept for reuse, as many as the sandboxes last used at once (up to `maxIdle`,
 * each for `idleMs`); busy ones belong to exactly one sandbox.
 */
export class ShellPool {
  private readonly idle: IdlePool<ShellThread>;
  private readonly spawn: ShellThreadSpawner;

  constructor(
    options: { readonly maxIdle?: number; readonly idleMs?: number; readonly spawn?: ShellThreadSpawner } = {},
  ) {
    this.spawn = options.spawn ?? spawnShellWorker;
    this.idle = new IdlePool({
      maxIdle: options.maxIdle ?? DEFAULT_MAX_IDLE,
      idleMs: options.idleMs ?? DEFAULT_IDLE_MS,
      isAlive: (thread) => thread.alive,
      discard: (thread) => thread.lose(new ShellThreadLost("released")),
    });
  }

  acquire(): ShellThread {
    return this.idle.take() ?? new ShellThread(this.spawn);
  }

  release(thread: ShellThread): void {
    this.idle.put(thread);
  }

  /** Terminates the idle threads (tests, shutdown). */
  drain(): void {
    this.idle.drain();
  }
}

/** The pool every os sandbox of this process shares. */
export const defaultShellPool = new ShellPool();

export class OsSandbox {
  private thread: ShellThread | undefined;
  private started = false;

  constructor(
    private readonly files: Readonly<Record<string, string>>,
    private readonly limits: SandboxLimits = DEFAULT_SANDBOX_LIMITS,
    private readonly pool: ShellPool = defaultShellPool,
  ) {}

  /**
   * Runs `script` in a fresh shell (files persist, cwd and variables do not) and renders what the
   * agent reads. Rejects with `signal.reason` when the episode itself is cancelled.
   */
  async run(script: string, signal: AbortSignal): Promise<string> {
    if (signal.aborted) throw signal.reason;
    const onAbort = () => this.discardThread();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      const thread = await this.shell();
      const body = RanBody.parse(
        await thread.request({ type: "run", script }, this.limits.commandTimeoutMs + this.limits.hardKillGraceMs),
      );
      return this.render(body.stdout + body.stderr, body.timedOut);
    } catch (error) {
      if (signal.aborted) throw signal.reason;
      if (!(error instanceof ShellThreadLost)) throw error;
      this.discardThread();
      this.started = false;
      return this.render(
        `[${error.message}; the machine was restarted and its filesystem is back to the initial state]`,
        false,
      );
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /** The current filesystem state (the initial files when no command ran). */
  async snapshot(): Promise<FsView> {
    if (!this.thread) return viewOf(this.files);
    const body = SnapshotBody.parse(
      await this.thread.request({ type: "snapshot" }, 10_000 + this.limits.hardKillGraceMs),
    );
    return viewOf(body.files, body.dirs);
  }

  /** Gives the shell thread back to the pool (its next user resets it). */
  close(): void {
    const thread = this.thread;
    this.thread = undefined;
    if (thread) this.pool.release(thread);
  }

  private async shell(): Promise<ShellThread> {
    if (this.thread && this.started) return this.thread;
    this.thread ??= this.pool.acquire();
    await this.thread.request({ type: "reset", files: this.files, limits: this.limits, home: SANDBOX_HOME }, 60_000);
    this.started = true;
    return this.thread;
  }

  private discardThread(): void {
    const thread = this.thread;
    this.thread = undefined;
    thread?.lose(new ShellThreadLost("discarded"));
  }

  private render(output: string, timedOut: boolean): string {
    const limit = this.limits.observationChars;
    let text = output;
    if (text.length > limit) text = `${text.slice(0, Math.max(0, limit - TRUNCATION_ROOM))}\n${TRUNCATION_NOTE}`;
    if (timedOut) {
      const seconds = this.limits.commandTimeoutMs / 1000;
      text += `${text && !text.endsWith("\n") ? "\n" : ""}[the command was stopped after ${seconds} s: time limit reached]`;
    }
    return text ? `The output of the OS:\n\n${text}` : "The output of the OS is empty.";
  }
}
