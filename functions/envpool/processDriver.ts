import { type ChildProcess, spawn } from "node:child_process";
import {
  closeSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import type { Logger } from "../../shared/log.ts";
import { processRuns } from "../../shared/processes.ts";
import type { DriverWorker, LaunchSpec, WorkerDriver } from "./driver.ts";

/** The package entry a worker process starts from (`agentrl env serve`). */
const AGENTRL_BIN = fileURLToPath(new URL("../../bin/agentrl.mjs", import.meta.url));

export interface ProcessDriverOptions {
  /** Task every worker of this pool serves. */
  readonly task: string;
  readonly controllerUrl: string;
  /**
   * Folder of one pid file per running worker: the process driver's ListTasks. A restarted
   * manager pointed at the same folder adopts the workers listed there.
   */
  readonly stateDir: string;
  /** Folder of the workers' output (`env-<task>-<n>.log`). @default stateDir */
  readonly logDir?: string;
  /** Heartbeat period of the workers. @default 2000 */
  readonly heartbeatMs?: number;
  /** The run's config file, passed on to each worker (its `limits`). */
  readonly configFile?: string;
  /** SIGKILL a worker this long after SIGTERM. @default 5000 */
  readonly stopGraceMs?: number;
  readonly log: Logger;
}

const PidFile = z.object({
  pid: z.number().int().positive(),
  task: z.string(),
  /** Known once the worker announced it (its log's `listening` line). */
  address: z.string().optional(),
  /** The worker's output, where it announces its address. */
  logFile: z.string().optional(),
  launchedAt: z.number(),
});
type PidFile = z.infer<typeof PidFile>;

/**
 * Env workers as child processes of this machine (`agentrl env serve <task> --port 0`), each
 * recorded in `<stateDir>/<pid>.json` so that listing works across manager restarts. A worker binds
 * a free port itself (a port picked here and bound later could be taken in between) and announces
 * its address in its log; listing reads it from there, and until then the worker has no address
 * (the manager counts it as starting).
 */
export class ProcessDriver implements WorkerDriver {
  readonly kind = "process";
  private readonly children = new Map<number, ChildProcess>();
  private sequence = 0;

  constructor(private readonly options: ProcessDriverOptions) {
    mkdirSync(options.stateDir, { recursive: true });
    mkdirSync(options.logDir ?? options.stateDir, { recursive: true });
  }

  async launch(spec: LaunchSpec): Promise<DriverWorker> {
    const { task, controllerUrl } = this.options;
    const args = [
      AGENTRL_BIN,
      "env",
      "serve",
      task,
      "--controller",
      controllerUrl,
      "--port",
      "0",
      "--concurrency",
      String(spec.concurrency),
      "--heartbeat-ms",
      String(this.options.heartbeatMs ?? 2_000),
    ];
    if (this.options.configFile !== undefined) args.push("--config", this.options.configFile);
    if (spec.maxEpisodes !== undefined) args.push("--max-episodes", String(spec.maxEpisodes));
    if (spec.maxAgeSeconds !== undefined) args.push("--max-age", String(spec.maxAgeSeconds));
    const launchedAt = Date.now();
    const logFile = join(
      this.options.logDir ?? this.options.stateDir,
      `env-${task}-${launchedAt}-${this.sequence++}.log`,
    );
    const out = openSync(logFile, "a");
    let child: ChildProcess;
    try {
      // Output goes to a file, not a pipe, so a worker outlives a manager that dies (and is adopted).
      child = spawn(process.execPath, args, { stdio: ["ignore", out, out] });
    } finally {
      closeSync(out);
    }
    const pid = child.pid;
    if (pid === undefined) throw new Error(`could not start an env worker for ${task} (see ${logFile})`);
    this.children.set(pid, child);
    child.once("exit", () => {
      this.children.delete(pid);
      rmSync(this.pidFile(pid), { force: true });
    });
    writePidFile(this.pidFile(pid), { pid, task, logFile, launchedAt });
    return { id: `pid:${pid}`, address: undefined, state: "running", launchedAt };
  }

  async stop(id: string, reason: string): Promise<void> {
    const pid = pidOf(id);
    if (!processRuns(pid)) {
      rmSync(this.pidFile(pid), { force: true });
      return;
    }
    this.options.log.info({ pid, reason }, "stopping env worker process");
    process.kill(pid, "SIGTERM");
    const deadline = Date.now() + (this.options.stopGraceMs ?? 5_000);
    while (processRuns(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    if (processRuns(pid)) process.kill(pid, "SIGKILL");
    rmSync(this.pidFile(pid), { force: true });
  }

  async list(): Promise<DriverWorker[]> {
    const out: DriverWorker[] = [];
    mkdirSync(this.options.stateDir, { recursive: true });
    for (const name of readdirSync(this.options.stateDir)) {
      if (!name.endsWith(".json")) continue;
      const file = join(this.options.stateDir, name);
      const record = this.readPidFile(file, name);
      if (record === undefined || record.task !== this.options.task) continue;
      const { pid, launchedAt } = record;
      const alive = processRuns(pid) && isWorkerProcess(pid, this.options.task);
      // A dead worker is reported once as stopped (the manager counts it), then forgotten.
      if (!alive) rmSync(file, { force: true });
      let address = record.address;
      if (alive && address === undefined && record.logFile !== undefined) {
        address = announcedAddress(record.logFile);
        if (address !== undefined) writePidFile(file, { ...record, address });
      }
      out.push({ id: `pid:${pid}`, address, state: alive ? "running" : "stopped", launchedAt });
    }
    return out;
  }

  private pidFile(pid: number): string {
    return join(this.options.stateDir, `${pid}.json`);
  }

  /**
   * A worker's pid file; one that does not parse (written by an older version, or cut short on a
   * full disk) still names its pid, and the worker is listed, without an address, if that pid is
   * an `env serve` of this task, so that it can still be stopped.
   */
  private readPidFile(file: string, name: string): PidFile | undefined {
    const parsed = PidFile.safeParse(readJson(file));
    if (parsed.success) return parsed.data;
    const pid = Number(/^(\d+)\.json$/.exec(name)?.[1]);
    if (!Number.isSafeInteger(pid) || pid <= 0) return undefined;
    const { task } = this.options;
    if (!processRuns(pid) || !isWorkerProcess(pid, task)) {
      rmSync(file, { force: true });
      return undefined;
    }
    let launchedAt = Date.now();
    try {
      launchedAt = statSync(file).mtimeMs;
    } catch {
      // removed meanwhile: listed once more with the time of this listing
    }
    const record: PidFile = { pid, task, launchedAt };
    writePidFile(file, record);
    return record;
  }
}

/**
 * Written whole or not at all (a temporary file renamed over it): a pool killed while writing
 * must not leave an empty pid file, which would hide a running worker from the next listing.
 */
function writePidFile(file: string, record: PidFile): void {
  const temporary = `${file}.${process.pid}.tmp`;
  writeFileSync(temporary, JSON.stringify(record));
  renameSync(temporary, file);
}

/**
 * Stops every worker a pool's state folder still lists as running (SIGTERM, SIGKILL after the
 * grace): what the launcher does once the pool itself has stopped, because workers are detached
 * to outlive a pool that dies, and a pool killed while closing leaves them running. Returns how
 * many it stopped.
 */
export async function stopListedWorkers(stateDir: string, task: string, log: Logger): Promise<number> {
  const driver = new ProcessDriver({ task, controllerUrl: "", stateDir, log });
  const running = (await driver.list()).filter((worker) => worker.state === "running");
  await Promise.all(running.map((worker) => driver.stop(worker.id, "its pool has stopped")));
  return running.length;
}

function pidOf(id: string): number {
  const pid = Number(id.replace(/^pid:/, ""));
  if (!Number.isSafeInteger(pid) || pid <= 0) throw new Error(`not a process worker id: ${id}`);
  return pid;
}

/** Guards against a recycled pid: the process must still be an `env serve` of this task (Linux /proc). */
function isWorkerProcess(pid: number, task: string): boolean {
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return true; // no /proc (macOS): trust the signal check
  }
  const args = cmdline.split("\0");
  const serve = args.indexOf("serve");
  return serve > 0 && args[serve - 1] === "env" && args[serve + 1] === task;
}

/** The bytes of a worker's log searched for its announcement (it is among the first lines). */
const ANNOUNCEMENT_WINDOW_BYTES = 64 * 1024;

const Announcement = z.object({ event: z.literal("listening"), address: z.string().url() });

/** The address a worker announced in its log (`{"event":"listening",...,"address":...}`), if it has yet. */
export function announcedAddress(logFile: string): string | undefined {
  let head: string;
  try {
    const fd = openSync(logFile, "r");
    try {
      const buffer = Buffer.alloc(ANNOUNCEMENT_WINDOW_BYTES);
      head = buffer.toString("utf8", 0, readSync(fd, buffer, 0, buffer.length, 0));
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
  for (const line of head.split("\n")) {
    if (!line.includes('"listening"')) continue;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      continue;
    }
    const announcement = Announcement.safeParse(parsed);
    if (announcement.success) return announcement.data.address;
  }
  return undefined;
}

function readJson(file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
}
