import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";

/**
 * Limit for every synchronous child process a test starts (spawnSync, execFileSync): one that never
 * ends would block its test worker for good, where no test timeout can fire, and the run with it.
 */
export const SYNC_TIMEOUT_MS = 30_000;

/** The repository's CLI entry. */
export const AGENTRL_BIN = fileURLToPath(new URL("../../bin/agentrl.mjs", import.meta.url));

export interface CliResult {
  /** Exit code; null when a signal (or the timeout) ended it. */
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

export interface CliOptions {
  readonly cwd?: string;
  /** Added to this process's environment. */
  readonly env?: NodeJS.ProcessEnv;
  /** SIGKILL after this long. @default 120_000 */
  readonly timeoutMs?: number;
}

/**
 * Runs a command to completion without blocking the test worker: a spawnSync that outlasts 60 s
 * on a loaded machine makes vitest's worker RPC time out, failing a green run.
 */
export function runProcess(command: string, args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      ...(options.cwd ? { cwd: options.cwd } : {}),
      env: { ...process.env, ...options.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), options.timeoutMs ?? 120_000);
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

/** Runs `agentrl <args>` under this Node (see runProcess). */
export function agentrl(args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return runProcess(process.execPath, [AGENTRL_BIN, ...args], options);
}
