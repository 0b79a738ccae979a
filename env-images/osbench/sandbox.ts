import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { hostname } from "node:os";
import { z } from "zod";
import { AgentRlError } from "../../shared/errors.ts";
import { processRuns } from "../../shared/processes.ts";
import { PersistentShell, type ShellLimits, type ShellProcess } from "./shell.ts";

/**
 * Where OS episodes run: a backend starts one sandbox per episode from an image, runs scripts in
 * it, opens its persistent shell, and removes it. The container backend drives podman or Docker
 * through their CLI; every container is labelled with its worker (host and pid), so a worker that
 * starts removes the containers of workers that died without removing theirs.
 */

export interface SandboxSpec {
  readonly image: string;
  /** Only instances that fetch packages at init get a network, and only where the host allows it. */
  readonly network: boolean;
  /** The task name, as a label (for `podman ps` and the sweep's report). */
  readonly task: string;
}

export interface RunResult {
  readonly exitCode: number;
  readonly stdout: Uint8Array;
  readonly stderr: Uint8Array;
}

export interface Sandbox {
  readonly id: string;
  /** Runs argv in the sandbox as root in /root, apart from the shell (init and check scripts). */
  run(argv: readonly string[], options?: { timeoutMs?: number; signal?: AbortSignal }): Promise<RunResult>;
  /** The episode's one interactive root bash in /root, opened on first use. */
  shell(): PersistentShell;
  /** Why the sandbox was stopped for exceeding a limit the agent controls (its disk), if it was. */
  readonly limitExceeded: string | undefined;
  /** Removes the sandbox and everything in it; safe to call twice. */
  close(): Promise<void>;
}

export interface SandboxBackend {
  readonly name: string;
  start(spec: SandboxSpec, signal?: AbortSignal): Promise<Sandbox>;
  /** Removes sandboxes whose worker process is gone; returns how many. */
  sweepOrphans(): Promise<number>;
}

/**
 * Upstream's per-container limits (1 GB, no swap, 2 CPUs) plus a process cap for fork bombs and a
 * disk cap: a container's writable layer lives on the host's disk, which upstream leaves open to a
 * `dd` of the agent. No file may grow past `diskBytes` (RLIMIT_FSIZE), and a watch of the layer's
 * size stops every process of the episode once it passes `diskBytes` in all.
 */
export const CONTAINER_LIMITS = { memory: "1g", cpus: "2", pids: 512, diskBytes: 1 << 30 } as const;

export interface DiskGuard {
  /** Most bytes the container's writable layer may hold. @default CONTAINER_LIMITS.diskBytes */
  readonly diskBytes: number;
  /** How often its size is read. @default 2000 */
  readonly pollMs: number;
}

export const LABEL = "org.agentrl.os";
export const WORKER_LABEL = "org.agentrl.os.worker";
/** This process, as the worker label names it. */
export const WORKER_ID = `${hostname()}:${process.pid}`;
/** A worker label naming the worker's own container on the same daemon (an ECS task's, by its Docker id). */
export const CONTAINER_WORKER = "container:";

const TaskMetadata = z.object({ DockerId: z.string().regex(/^[0-9a-f]{12,64}$/, "must be a Docker container id") });

/**
 * Who this worker is, for its containers' label. On ECS (the task metadata endpoint is set) it is
 * the worker's own container on the host's daemon: every worker task on a host has a hostname of
 * its own, so a hostname and pid would never match the next worker's, and a dead task's episodes
 * would stay; a container id lets any worker on the host see that their worker is gone. Elsewhere
 * the host name and pid.
 * @example await workerIdentity() // "container:3f2a…" on ECS, "myhost:4242" elsewhere
 */
export async function workerIdentity(env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const endpoint = env.ECS_CONTAINER_METADATA_URI_V4;
  if (!endpoint) return WORKER_ID;
  const response = await fetch(endpoint, { signal: AbortSignal.timeout(10_000) });
  if (!response.ok)
    throw new AgentRlError(
      `the ECS task metadata endpoint ${endpoint} answered ${response.status}: cannot label episodes`,
    );
  const parsed = TaskMetadata.safeParse(await response.json());
  if (!parsed.success)
    throw new AgentRlError(
      `the ECS task metadata endpoint ${endpoint} gave no DockerId: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
    );
  return `${CONTAINER_WORKER}${parsed.data.DockerId}`;
}

const RUNC = "/usr/sbin/runc";

interface Exec {
  readonly status: number | null;
  readonly stdout: Buffer;
  readonly stderr: Buffer;
}

function execFile(
  bin: string,
  args: readonly string[],
  options: { timeoutMs?: number; signal?: AbortSignal } = {},
): Promise<Exec> {
  return new Promise((resolve, reject) => {
    const child = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => out.push(chunk));
    child.stderr.on("data", (chunk: Buffer) => err.push(chunk));
    const kill = () => child.kill("SIGKILL");
    const timer = setTimeout(kill, options.timeoutMs ?? 300_000);
    options.signal?.addEventListener("abort", kill, { once: true });
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("close", (status) => {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", kill);
      resolve({ status, stdout: Buffer.concat(out), stderr: Buffer.concat(err) });
    });
  });
}

async function answers(bin: string, args: readonly string[]): Promise<boolean> {
  try {
    return (await execFile(bin, args, { timeoutMs: 20_000 })).status === 0;
  } catch {
    return false;
  }
}

/** podman (no daemon needed) or Docker with a daemon; `AGENTRL_CONTAINER_ENGINE` picks or says `none`. */
export async function detectContainerCli(
  preferred = process.env.AGENTRL_CONTAINER_ENGINE,
): Promise<"podman" | "docker" | undefined> {
  if (preferred === "none") return undefined;
  const order: Array<"podman" | "docker"> = preferred === "docker" ? ["docker", "podman"] : ["podman", "docker"];
  for (const bin of order)
    if (await answers(bin, bin === "podman" ? ["version", "--format", "{{.Client.Version}}"] : ["info"])) return bin;
  return undefined;
}

/** A sandbox per episode: one container from the CLI of podman or Docker. */
export class ContainerBackend implements SandboxBackend {
  readonly name: string;
  /** podman's default runtime (crun) cannot start containers under cgroups v1 hybrid mode; runc can. */
  private readonly runtimeFlags: readonly string[];

  private readonly disk: DiskGuard;

  constructor(
    private readonly bin: "podman" | "docker",
    private readonly shellLimits?: ShellLimits,
    disk: Partial<DiskGuard> = {},
    /** The worker label of this backend's containers ({@link workerIdentity}). @default WORKER_ID */
    private readonly workerId: string = WORKER_ID,
  ) {
    this.name = bin;
    this.disk = { diskBytes: CONTAINER_LIMITS.diskBytes, pollMs: 2_000, ...disk };
    this.runtimeFlags = bin === "podman" && existsSync(RUNC) ? ["--runtime", RUNC] : [];
  }

  private limitFlags: Promise<string[]> | undefined;

  /**
   * podman's default file and process limits exceed what some hosts allow (setrlimit fails with
   * EPERM in runc); 4096 of each, never above this process's own hard limits, always works.
   */
  private ulimits(): Promise<string[]> {
    this.limitFlags ??= (async () => {
      if (this.bin !== "podman") return [];
      const { stdout } = await execFile("bash", ["-c", "ulimit -Hn; ulimit -Hu"]);
      const [nofile, nproc] = stdout
        .toString()
        .split("\n")
        .map((line) => (/^\d+$/.test(line.trim()) ? Math.min(Number(line), 4096) : 4096));
      return [
        "--ulimit",
        `nofile=${nofile ?? 4096}:${nofile ?? 4096}`,
        "--ulimit",
        `nproc=${nproc ?? 4096}:${nproc ?? 4096}`,
      ];
    })();
    return this.limitFlags;
  }

  async start(spec: SandboxSpec, signal?: AbortSignal): Promise<Sandbox> {
    const name = `agentrl-os-${randomBytes(6).toString("hex")}`;
    const args = [
      "run",
      "-d",
      ...this.runtimeFlags,
      ...(await this.ulimits()),
      "--name",
      name,
      "--label",
      `${LABEL}=1`,
      "--label",
      `${WORKER_LABEL}=${this.workerId}`,
      "--label",
      `${LABEL}.task=${spec.task}`,
      "--memory",
      CONTAINER_LIMITS.memory,
      "--memory-swap",
      CONTAINER_LIMITS.memory,
      "--cpus",
      CONTAINER_LIMITS.cpus,
      "--pids-limit",
      String(CONTAINER_LIMITS.pids),
      "--ulimit",
      `fsize=${this.disk.diskBytes}:${this.disk.diskBytes}`,
      ...(spec.network ? [] : ["--network", "none"]),
      "--user",
      "root",
      "--workdir",
      "/root",
      // Upstream keeps the container up with `sleep infinity` as pid 1. Here pid 1 is a bash loop
      // around a sleep: the kernel spares pid 1 from the agent's `kill -9 -1`, the loop restarts
      // the sleep, and bash reaps the orphans of a killed process flood, whose zombies would
      // otherwise hold the pids cap forever.
      "--entrypoint",
      "/bin/bash",
      spec.image,
      "-c",
      "while :; do sleep 3600 & wait; done",
    ];
    const started = await execFile(this.bin, args, { timeoutMs: 120_000, ...(signal ? { signal } : {}) });
    if (started.status !== 0) {
      await execFile(this.bin, ["rm", "-f", name], { timeoutMs: 60_000 }).catch(() => undefined);
      throw new AgentRlError(
        `${this.bin} could not start a sandbox from ${spec.image}: ${started.stderr.toString().trim().slice(-1000)}`,
      );
    }
    return new ContainerSandbox(this.bin, name, this.shellLimits, this.disk);
  }

  async sweepOrphans(): Promise<number> {
    const listed = await execFile(
      this.bin,
      ["ps", "-a", "--filter", `label=${WORKER_LABEL}`, "--format", `{{.Names}} {{index .Labels "${WORKER_LABEL}"}}`],
      { timeoutMs: 60_000 },
    );
    if (listed.status !== 0) return 0;
    let removed = 0;
    for (const line of listed.stdout.toString().split("\n")) {
      const [name, worker] = line.trim().split(" ");
      if (!name || !worker || worker === this.workerId) continue;
      if (worker.startsWith(CONTAINER_WORKER)) {
        if (await this.isRunning(worker.slice(CONTAINER_WORKER.length))) continue;
      } else {
        const [host, pid] = worker.split(":");
        if (host !== hostname() || processRuns(Number(pid))) continue;
      }
      if ((await execFile(this.bin, ["rm", "-f", "-t", "0", name], { timeoutMs: 60_000 })).status === 0) removed++;
    }
    return removed;
  }

  /** Whether a container of this daemon runs (a worker's own, on ECS); false once it is gone. */
  private async isRunning(container: string): Promise<boolean> {
    const inspected = await execFile(this.bin, ["container", "inspect", "--format", "{{.State.Running}}", container], {
      timeoutMs: 60_000,
    });
    return inspected.status === 0 && inspected.stdout.toString().trim() === "true";
  }
}

class ContainerSandbox implements Sandbox {
  private opened: PersistentShell | undefined;
  private closed: Promise<void> | undefined;
  private exceeded: string | undefined;
  private readonly diskWatch: NodeJS.Timeout;

  constructor(
    private readonly bin: "podman" | "docker",
    readonly id: string,
    private readonly shellLimits: ShellLimits | undefined,
    private readonly disk: DiskGuard,
  ) {
    let reading = false;
    this.diskWatch = setInterval(() => {
      if (reading || this.exceeded) return;
      reading = true;
      void this.checkDisk().finally(() => {
        reading = false;
      });
    }, disk.pollMs);
    this.diskWatch.unref();
  }

  get limitExceeded(): string | undefined {
    return this.exceeded;
  }

  /** The writable layer's size; past the cap, every process but pid 1 is killed and stays so. */
  private async checkDisk(): Promise<void> {
    const inspected = await execFile(this.bin, ["container", "inspect", "--size", "--format", "{{.SizeRw}}", this.id], {
      timeoutMs: 60_000,
    }).catch(() => undefined);
    const bytes = Number(inspected?.stdout.toString().trim());
    if (!Number.isFinite(bytes) || bytes <= this.disk.diskBytes || this.closed) return;
    clearInterval(this.diskWatch);
    await execFile(this.bin, ["exec", this.id, "bash", "-c", "kill -9 -1"], { timeoutMs: 30_000 }).catch(
      () => undefined,
    );
    // Set once nothing of the episode runs any more: from here on the episode takes no command.
    this.exceeded = `the episode wrote more than ${this.disk.diskBytes} bytes to the container's disk`;
    this.opened?.close();
  }

  async run(argv: readonly string[], options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<RunResult> {
    const result = await execFile(this.bin, ["exec", "-u", "root", "-w", "/root", this.id, ...argv], options);
    return { exitCode: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
  }

  shell(): PersistentShell {
    if (this.opened?.alive) return this.opened;
    const child = spawn(this.bin, ["exec", "-i", "-u", "root", "-w", "/root", this.id, "bash"], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.opened = new PersistentShell(this.processOf(child), this.shellLimits);
    // One stream, in order, as a terminal shows it.
    child.stdin.write("exec 2>&1\n");
    return this.opened;
  }

  private processOf(child: ChildProcess): ShellProcess {
    const id = this.id;
    const bin = this.bin;
    return {
      write: (text) => {
        child.stdin?.write(text);
      },
      onData: (listener) => {
        child.stdout?.on("data", listener);
        child.stderr?.on("data", listener);
      },
      onExit: (listener) => {
        child.on("close", listener);
      },
      // A command over its time limit may be a loop in the shell itself, which no signal to its
      // children ends: every process but pid 1 is killed (the shell too); the next call opens a
      // fresh shell in the same container, whose files stay.
      async interrupt() {
        await execFile(bin, ["exec", id, "bash", "-c", "kill -9 -1"], { timeoutMs: 30_000 }).catch(() => undefined);
      },
      kill: () => {
        child.kill("SIGKILL");
      },
    };
  }

  close(): Promise<void> {
    this.closed ??= (async () => {
      clearInterval(this.diskWatch);
      this.opened?.close();
      await execFile(this.bin, ["rm", "-f", "-t", "0", this.id], { timeoutMs: 60_000 }).catch(() => undefined);
    })();
    return this.closed;
  }
}
