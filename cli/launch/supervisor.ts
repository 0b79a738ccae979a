import { type ChildProcess, spawn } from "node:child_process";
import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { AgentRlError } from "../../shared/errors.ts";
import { SUPERVISOR_PID_ENV } from "../supervisorWatch.ts";
import { addNiceness } from "./priority.ts";

/** The package entry every role process starts from. */
export const AGENTRL_BIN = fileURLToPath(new URL("../../bin/agentrl.mjs", import.meta.url));

/** A role process died while the run needed it. */
export class RoleFailedError extends AgentRlError {
  override readonly name = "RoleFailedError";
}

export interface RoleSpec {
  /** Unique name; also the log file name (`logs/<name>.log`). */
  readonly name: string;
  /** Arguments after `agentrl`, e.g. ["controller", "--port", "5020"]. */
  readonly args: readonly string[];
  /** Flags for `node` itself, before the script (V8 flags that NODE_OPTIONS does not allow). */
  readonly nodeFlags?: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  /** A role whose exit ends the run (the trainer); others exiting early is a failure. */
  readonly primary?: boolean;
  /**
   * Restart the role when it dies (as ECS restarts a task), up to this many times; for roles that
   * keep their state in the queues and stores (trainer, feeder, rollout workers), and for servers:
   * one started with `--port 0` is restarted on the port it announced, so the URL others hold
   * stays valid. @default 0
   */
  readonly maxRestarts?: number;
  /**
   * SIGKILL the role this long after SIGTERM instead of the stop call's grace: for a role that
   * stops processes of its own on close (an env pool stops its workers), longer than theirs.
   */
  readonly stopGraceMs?: number;
}

export interface RoleExit {
  readonly name: string;
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface SupervisorOptions {
  /**
   * Niceness to add to a role's process over the supervisor's own, by role name (cli/launch/priority.ts);
   * applied at every (re)start and inherited by what the role starts. @default - every role at the supervisor's niceness
   */
  readonly nicenessOf?: (roleName: string) => number;
}

/** How much of a role's stderr an error about its early exit quotes. */
const STDERR_TAIL_CHARS = 2_000;

interface Running {
  readonly spec: RoleSpec;
  /** The arguments of the next launch: the spec's, with `--port 0` replaced by the announced port. */
  args: readonly string[];
  /** The current process (a restart replaces it). */
  child: ChildProcess;
  readonly log: WriteStream;
  /** Resolves when the role has exited for good (not when it is about to be restarted). */
  readonly exited: Promise<RoleExit>;
  /**
   * URL from the role's `{"event":"listening","url":...}` stdout line (servers announce their port
   * this way). A launch that dies before announcing it and is restarted leaves it to the next
   * launch; it rejects only when the role exits for good without having announced it.
   */
  listening: Promise<string>;
  /** Settles {@link listening}; undefined once it has. */
  announce?: { resolve: (url: string) => void; reject: (error: Error) => void };
  /** Set when we stop it on purpose, so its exit is not reported as a failure. */
  stopped: boolean;
  restarts: number;
}

/**
 * Runs roles as child processes of one machine (the embedded default), each with its output in
 * `<runDir>/logs/<name>.log`. Stopping sends SIGTERM in reverse start order (producers stop
 * before the stores they write to), then SIGKILL after a grace period.
 */
export class Supervisor {
  private readonly running: Running[] = [];
  private stopping = false;
  private readonly stopAllCalled = new AbortController();
  private readonly unexpectedExit: Promise<RoleExit>;
  private reportUnexpected: (exit: RoleExit) => void = () => {};

  constructor(
    private readonly runDir: string,
    private readonly baseEnv: NodeJS.ProcessEnv = process.env,
    private readonly options: SupervisorOptions = {},
  ) {
    mkdirSync(join(runDir, "logs"), { recursive: true });
    this.unexpectedExit = new Promise((resolve) => {
      this.reportUnexpected = resolve;
    });
  }

  /** Starts a role; its exit while the run is going (non-primary, or primary with an error) is reported by `failure()`. */
  start(spec: RoleSpec): void {
    if (this.running.some((r) => r.spec.name === spec.name && r.child.exitCode === null && r.child.signalCode === null))
      throw new Error(`role ${spec.name} is already running`);
    const log = createWriteStream(join(this.runDir, "logs", `${spec.name}.log`), { flags: "a" });
    let finish: (exit: RoleExit) => void = () => {};
    const exited = new Promise<RoleExit>((resolve) => {
      finish = resolve;
    });
    const role = { spec, args: spec.args, log, exited, stopped: false, restarts: 0 } as Running;
    this.launch(role, finish);
    this.running.push(role);
  }

  private launch(role: Running, finish: (exit: RoleExit) => void): void {
    const { spec, log } = role;
    const child = spawn(process.execPath, [...(spec.nodeFlags ?? []), AGENTRL_BIN, ...role.args], {
      // its roles stop when this process is gone, even SIGKILLed (cli/supervisorWatch.ts)
      env: { ...this.baseEnv, ...spec.env, [SUPERVISOR_PID_ENV]: String(process.pid) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    role.child = child;
    child.stdout?.pipe(log, { end: false });
    child.stderr?.pipe(log, { end: false });
    const nice = this.options.nicenessOf?.(spec.name) ?? 0;
    if (nice > 0 && child.pid !== undefined) {
      const set = addNiceness(child.pid, nice);
      log.write(
        "niceness" in set
          ? `[supervisor] ${spec.name} runs at niceness ${set.niceness} (+${nice})\n`
          : `[supervisor] ${spec.name}: could not add niceness ${nice} (${set.error}); it runs at the launcher's\n`,
      );
    }
    // A launch after one that announced its URL announces it anew; one after a launch that died
    // before announcing settles the same promise, so start-up waits through the restart.
    if (!role.announce) {
      role.listening = new Promise<string>((resolve, reject) => {
        role.announce = { resolve, reject };
      });
      role.listening.catch(() => {});
    }
    // what the role said last, for the error when it dies before it listens
    let stderrTail = "";
    const keepTail = (chunk: Buffer) => {
      stderrTail = (stderrTail + chunk.toString()).slice(-STDERR_TAIL_CHARS);
    };
    child.stderr?.on("data", keepTail);
    let buffered = "";
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString();
      for (let nl = buffered.indexOf("\n"); nl >= 0; nl = buffered.indexOf("\n")) {
        const url = listeningUrl(buffered.slice(0, nl));
        buffered = buffered.slice(nl + 1);
        if (url) {
          child.stdout?.off("data", onData);
          child.stderr?.off("data", keepTail);
          role.args = withAnnouncedPort(role.args, url);
          role.announce?.resolve(url);
          role.announce = undefined;
          return;
        }
      }
    };
    child.stdout?.on("data", onData);
    child.once("exit", (code, signal) => {
      const exit = { name: spec.name, code, signal };
      const expected = this.stopping || role.stopped || (spec.primary === true && code === 0);
      if (!expected && role.restarts < (spec.maxRestarts ?? 0)) {
        role.restarts += 1;
        log.write(`\n[supervisor] ${spec.name} exited (code ${code}, signal ${signal}); restart ${role.restarts}\n`);
        setTimeout(() => {
          if (this.stopping || role.stopped) {
            this.neverListened(role, exit, stderrTail);
            finish(exit);
          } else this.launch(role, finish);
        }, 1_000);
        return;
      }
      this.neverListened(role, exit, stderrTail);
      if (!expected) this.reportUnexpected(exit);
      finish(exit);
    });
  }

  /** Rejects a role's URL when it exits for good before announcing one, with the end of what it wrote to stderr. */
  private neverListened(role: Running, exit: RoleExit, stderrTail: string): void {
    if (!role.announce) return;
    const said = stderrTail.trim() === "" ? "" : `; the end of its stderr:\n${stderrTail.trimEnd()}`;
    role.announce.reject(
      new Error(
        `${exit.name} exited (code ${exit.code}, signal ${exit.signal}) before listening; see ${join(this.runDir, "logs", `${exit.name}.log`)}${said}`,
      ),
    );
    role.announce = undefined;
  }

  /** Process id of a role's current process (undefined before it started or for an unknown name). */
  pidOf(name: string): number | undefined {
    return this.running.findLast((r) => r.spec.name === name)?.child.pid;
  }

  /** How often a role was restarted after dying. */
  restartsOf(name: string): number {
    return this.running.findLast((r) => r.spec.name === name)?.restarts ?? 0;
  }

  /** Resolves with the URL a server role announced on stdout; rejects if it exits first or after `timeoutMs`. */
  async urlOf(name: string, timeoutMs = 60_000): Promise<string> {
    const role = this.running.findLast((r) => r.spec.name === name);
    if (!role) throw new Error(`no role ${name}`);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${name} did not announce a URL within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([role.listening, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Aborted once `stopAll` runs: waits on the roles (a readiness poll) end with it. */
  get stopSignal(): AbortSignal {
    return this.stopAllCalled.signal;
  }

  /** Resolves when a role exits on its own (a crash, or a failed primary): the run cannot go on. */
  failure(): Promise<RoleExit> {
    return this.unexpectedExit;
  }

  /** Resolves like `work`, but rejects as soon as a role exits unexpectedly (so start-up never waits on a dead role). */
  guard<T>(work: Promise<T>): Promise<T> {
    const failed = this.unexpectedExit.then((exit): never => {
      throw new RoleFailedError(
        `role ${exit.name} exited (code ${exit.code}, signal ${exit.signal}); see ${join(this.runDir, "logs", `${exit.name}.log`)}`,
      );
    });
    return Promise.race([work, failed]);
  }

  /** Resolves when the named role exits. */
  exitOf(name: string): Promise<RoleExit> {
    const role = this.running.findLast((r) => r.spec.name === name);
    if (!role) throw new Error(`no role ${name}`);
    return role.exited;
  }

  /** Stops one role on purpose (SIGTERM, SIGKILL after `graceMs`); its exit is not a failure. */
  async stop(name: string, graceMs = 5_000): Promise<RoleExit> {
    const role = this.running.findLast((r) => r.spec.name === name);
    if (!role) throw new Error(`no role ${name}`);
    return this.terminate(role, graceMs);
  }

  private async terminate(role: Running, graceMs: number): Promise<RoleExit> {
    role.stopped = true;
    if (role.child.exitCode === null && role.child.signalCode === null) role.child.kill("SIGTERM");
    const timer = setTimeout(() => role.child.kill("SIGKILL"), role.spec.stopGraceMs ?? graceMs);
    const exit = await role.exited;
    clearTimeout(timer);
    if (!role.log.writableEnded) role.log.end();
    return exit;
  }

  /** Stops every role (idempotent): SIGTERM in reverse order, SIGKILL after `graceMs`. */
  async stopAll(graceMs = 5_000): Promise<RoleExit[]> {
    this.stopping = true;
    this.stopAllCalled.abort();
    const exits: RoleExit[] = [];
    for (const role of [...this.running].reverse()) exits.push(await this.terminate(role, graceMs));
    return exits;
  }
}

function listeningUrl(line: string): string | undefined {
  if (!line.startsWith("{")) return undefined;
  try {
    const event = JSON.parse(line) as { event?: unknown; url?: unknown };
    return event.event === "listening" && typeof event.url === "string" ? event.url : undefined;
  } catch {
    return undefined;
  }
}

/** Polls `probe` until it returns true, `timeoutMs` passes or `signal` aborts (each of the last two rejects). */
export async function waitFor(
  what: string,
  probe: () => Promise<boolean>,
  timeoutMs = 60_000,
  signal?: AbortSignal,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (signal?.aborted) throw new Error(`stopped while waiting for ${what}`);
    if (await probe().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(200, undefined, signal ? { signal } : {}).catch(() => undefined);
  }
}

/**
 * `args` with a `--port 0` replaced by the port of the URL the server announced. The server binds
 * port 0 itself, so no other process can take its port between a pick and the bind (as with a
 * port picked beforehand); its restarts then bind the port it got.
 */
export function withAnnouncedPort(args: readonly string[], url: string): readonly string[] {
  const at = args.indexOf("--port");
  if (at < 0 || args[at + 1] !== "0") return args;
  const port = new URL(url).port;
  return port === "" ? args : [...args.slice(0, at + 1), port, ...args.slice(at + 2)];
}
