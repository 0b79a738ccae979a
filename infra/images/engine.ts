import { spawn } from "node:child_process";
import { existsSync } from "node:fs";

/**
 * A container engine that can build and run the images on this machine: podman (daemonless, the
 * one Debian ships) or Docker with a reachable daemon. The flags carry this machine kind's quirks
 * (see docs/containers.md): crun fails under cgroups v1 hybrid mode, so podman uses runc
 * when it is installed, and podman's default file and process limits cannot be set here.
 */
export interface ContainerEngine {
  readonly kind: "podman" | "docker";
  readonly bin: string;
  /** Flags of `build` and `run` alike (runtime, ulimits). */
  readonly commonFlags: readonly string[];
}

export interface ExecResult {
  /** Exit code; null when a signal (or the timeout) ended it. */
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface ExecOptions {
  readonly cwd?: string;
  readonly env?: NodeJS.ProcessEnv;
  /** Written to the child's stdin, then closed. */
  readonly input?: string;
  /** SIGKILL after this long. @default 600_000 */
  readonly timeoutMs?: number;
  /** Called with each chunk of output as it arrives (progress of a long build). */
  readonly onOutput?: (chunk: string) => void;
}

/** Runs a command to completion without blocking the event loop (builds take minutes). */
export function exec(command: string, args: readonly string[], options: ExecOptions = {}): Promise<ExecResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...(options.cwd ? { cwd: options.cwd } : {}),
      env: { ...process.env, ...options.env },
      stdio: [options.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      options.onOutput?.(chunk);
    });
    child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
      options.onOutput?.(chunk);
    });
    if (options.input !== undefined) child.stdin?.end(options.input);
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 600_000);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

/** Runs `command`, throwing with its output when it fails. */
export async function execOrThrow(
  command: string,
  args: readonly string[],
  options: ExecOptions = {},
): Promise<ExecResult> {
  const result = await exec(command, args, options);
  if (result.status !== 0)
    throw new Error(
      `${command} ${args.join(" ")} failed (exit ${result.status}):\n${(result.stderr || result.stdout).slice(-4000)}`,
    );
  return result;
}

async function answers(command: string, args: readonly string[]): Promise<boolean> {
  try {
    return (await exec(command, args, { timeoutMs: 20_000 })).status === 0;
  } catch {
    return false; // not installed
  }
}

/**
 * File and process limits for containers: podman's defaults (about a million) exceed what this
 * machine kind allows (setrlimit fails with EPERM), while 4096 of each was measured to work and
 * is plenty for one Node role per container. Never more than the caller's own hard limit.
 */
async function containerLimits(): Promise<{ nofile: number; nproc: number }> {
  const { stdout } = await exec("sh", ["-c", "ulimit -Hn; ulimit -Hu"]);
  const [nofile, nproc] = stdout.split("\n").map((line) => (/^\d+$/.test(line.trim()) ? Number(line) : 4096));
  return { nofile: Math.min(nofile ?? 4096, 4096), nproc: Math.min(nproc ?? 4096, 4096) };
}

/** Where Debian installs runc; podman's default runtime (crun) cannot start containers under cgroups v1 hybrid mode. */
const RUNC = "/usr/sbin/runc";

/**
 * The engine to use, or undefined when neither podman nor a Docker daemon answers.
 * `AGENTRL_CONTAINER_ENGINE=podman|docker` picks one when both exist; `none` uses neither
 * (skips the container tests on a machine that has an engine).
 */
export async function detectEngine(
  preferred = process.env.AGENTRL_CONTAINER_ENGINE,
): Promise<ContainerEngine | undefined> {
  if (preferred === "none") return undefined;
  const order: Array<"podman" | "docker"> = preferred === "docker" ? ["docker", "podman"] : ["podman", "docker"];
  for (const kind of order) {
    // `docker version` succeeds without a daemon; `info` needs one. podman needs none.
    if (!(await answers(kind, kind === "podman" ? ["version", "--format", "{{.Client.Version}}"] : ["info"]))) continue;
    if (kind === "docker") return { kind, bin: "docker", commonFlags: [] };
    const limits = await containerLimits();
    return {
      kind,
      bin: "podman",
      commonFlags: [
        ...(existsSync(RUNC) ? ["--runtime", RUNC] : []),
        "--ulimit",
        `nofile=${limits.nofile}:${limits.nofile}`,
        "--ulimit",
        `nproc=${limits.nproc}:${limits.nproc}`,
      ],
    };
  }
  return undefined;
}

/** Runs the engine with `args`, throwing with its output on failure. */
export function engineExec(engine: ContainerEngine, args: readonly string[], options: ExecOptions = {}) {
  return execOrThrow(engine.bin, args, options);
}

/** True when the engine holds an image named `name`. */
export async function imageExists(engine: ContainerEngine, name: string): Promise<boolean> {
  return (
    (await exec(engine.bin, ["image", "inspect", "--format", "{{.Id}}", name], { timeoutMs: 30_000 })).status === 0
  );
}
