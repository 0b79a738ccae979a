import { randomBytes } from "node:crypto";

/**
 * One persistent root bash per episode, driven through its stdin. Each command is sent as an
 * `eval` of its text followed by a `printf` of a sentinel carrying a per-shell secret, the
 * command's number and its exit status; the command's output is everything before that sentinel.
 * The shell reads its stdin itself, so `cd`, variables, background jobs and `su` (whose shell then
 * reads the next commands) carry over between calls, as in upstream's terminal.
 */

/** When a command's output is returned without its sentinel. */
export interface ShellLimits {
  /** No output for this long: return what came (upstream's terminal read gave up after 5 s of quiet). */
  readonly idleMs: number;
  /** A command may run at most this long in all; then it is killed, and its shell with it. */
  readonly totalMs: number;
  /** Output kept per command; the rest is dropped (observations show 800 characters anyway). */
  readonly maxBytes: number;
}

/** How long the first command may stay quiet while the shell itself starts. */
const STARTUP_MS = 30_000;

export const DEFAULT_SHELL_LIMITS: ShellLimits = { idleMs: 5_000, totalMs: 60_000, maxBytes: 1 << 20 };

/**
 * The text written to the shell's stdin to run `script` as command number `n`: an `eval` of the
 * script as one single-quoted word, then a `printf` of the sentinel with the script's status.
 * POSIX sh reads both (after `su user` the user's shell may be dash), and both are builtins, so a
 * command runs even when the process cap is full (`kill` can then free it).
 */
export function commandText(script: string, secret: string, n: number): string {
  const quoted = `'${script.replaceAll("'", "'\\''")}'`;
  // The sentinel's leading newline ends an unterminated last line of output; the reader removes it.
  return `eval ${quoted}\nprintf '\\n${sentinelPrefix(secret, n)}%d__\\n' "$?"\n`;
}

function sentinelPrefix(secret: string, n: number): string {
  return `__agentrl_${secret}_${n}_`;
}

/** What one command produced. */
export interface CommandResult {
  readonly output: Uint8Array;
  /** The script's exit status; undefined when the command had not finished (timeout, shell gone). */
  readonly exitCode?: number;
  readonly ended: "sentinel" | "idle" | "total" | "aborted" | "exited";
}

/**
 * Splits a shell's output stream into commands. Bytes before command n's sentinel are its output,
 * minus the newline the sentinel line starts with; a late sentinel of an earlier command (one that
 * outlived its time limit) is cut out wherever it appears.
 */
export class SentinelReader {
  private buffer = Buffer.alloc(0);
  private dropped = 0;

  constructor(
    private readonly secret: string,
    private readonly maxBytes: number,
  ) {}

  push(chunk: Uint8Array): void {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    // Keep the head (what the agent will see) and a tail long enough to hold a sentinel.
    const keepTail = 256;
    if (this.buffer.length > this.maxBytes + keepTail) {
      const cut = this.buffer.length - keepTail;
      this.dropped += cut - this.maxBytes;
      this.buffer = Buffer.concat([this.buffer.subarray(0, this.maxBytes), this.buffer.subarray(cut)]);
    }
  }

  /** Command n's output and status once its sentinel has arrived; what follows stays buffered. */
  take(n: number): { output: Uint8Array; exitCode: number } | undefined {
    const text = this.buffer.toString("latin1");
    const pattern = new RegExp(`\\n?${sentinelPrefix(this.secret, n)}(-?\\d+)__\\n`);
    const found = pattern.exec(text);
    if (!found) return undefined;
    const output = this.withoutStale(this.buffer.subarray(0, found.index)).subarray(0, this.maxBytes);
    this.buffer = this.buffer.subarray(found.index + found[0].length);
    this.dropped = 0;
    return { output, exitCode: Number(found[1]) };
  }

  /** Everything buffered so far (a command that timed out), minus stale sentinels. */
  drain(): Uint8Array {
    const output = this.withoutStale(this.buffer).subarray(0, this.maxBytes);
    this.buffer = Buffer.alloc(0);
    this.dropped = 0;
    return output;
  }

  private withoutStale(bytes: Uint8Array): Uint8Array {
    const stale = new RegExp(`\\n?__agentrl_${this.secret}_\\d+_-?\\d+__\\n`, "g");
    return Buffer.from(Buffer.from(bytes).toString("latin1").replace(stale, ""), "latin1");
  }
}

/** The two ends of a running shell process (an `exec -i` into a container, or a local bash in tests). */
export interface ShellProcess {
  write(text: string): void;
  onData(listener: (chunk: Uint8Array) => void): void;
  onExit(listener: () => void): void;
  /** Ends a runaway command; the shell may end with it (then the sandbox opens a new one). */
  interrupt(): Promise<void>;
  kill(): void;
}

/** Runs commands one at a time in one shell process. */
export class PersistentShell {
  private readonly secret = randomBytes(8).toString("hex");
  private readonly reader: SentinelReader;
  private count = 0;
  private exited = false;
  private wake: (() => void) | undefined;

  constructor(
    private readonly process: ShellProcess,
    private readonly limits: ShellLimits = DEFAULT_SHELL_LIMITS,
  ) {
    this.reader = new SentinelReader(this.secret, limits.maxBytes);
    process.onData((chunk) => {
      this.reader.push(chunk);
      this.wake?.();
    });
    process.onExit(() => {
      this.exited = true;
      this.wake?.();
    });
  }

  get alive(): boolean {
    return !this.exited;
  }

  /** Runs `script`; resolves when its sentinel comes, the shell goes quiet or exits, or `signal` aborts. */
  async run(script: string, signal?: AbortSignal): Promise<CommandResult> {
    const n = ++this.count;
    if (this.exited) return { output: new Uint8Array(), ended: "exited" };
    this.process.write(commandText(script, this.secret, n));
    const started = Date.now();
    let lastData = Date.now();
    let total = false;
    // The first command also waits for the shell to start (`podman exec` takes seconds on a busy
    // host), which must not count as the command's quiet time.
    const idleMs = n === 1 ? Math.max(this.limits.idleMs, STARTUP_MS) : this.limits.idleMs;
    for (;;) {
      const done = this.reader.take(n);
      if (done) return { output: done.output, exitCode: done.exitCode, ended: "sentinel" };
      if (this.exited) return { output: this.reader.drain(), ended: "exited" };
      if (signal?.aborted) return { output: this.reader.drain(), ended: "aborted" };
      const now = Date.now();
      if (now - started >= this.limits.totalMs) total = true;
      if (total || now - lastData >= idleMs) {
        if (total) {
          await this.process.interrupt();
          await this.exitWithin(5_000);
        }
        return { output: this.reader.drain(), ended: total ? "total" : "idle" };
      }
      const wait = Math.min(idleMs - (now - lastData), this.limits.totalMs - (now - started));
      const woke = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), wait);
        const onAbort = () => resolve(false);
        signal?.addEventListener("abort", onAbort, { once: true });
        this.wake = () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          resolve(true);
        };
      });
      this.wake = undefined;
      if (woke) lastData = Date.now();
    }
  }

  /** Waits until the shell process has ended, or `ms` have passed. */
  private async exitWithin(ms: number): Promise<void> {
    const until = Date.now() + ms;
    while (!this.exited && Date.now() < until)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, until - Date.now());
        this.wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    this.wake = undefined;
  }

  close(): void {
    this.process.kill();
  }
}
