import { join } from "node:path";
import { stopListedWorkers } from "../../functions/envpool/processDriver.ts";
import { ControllerClient } from "../../shared/env/client.ts";
import type { Logger } from "../../shared/log.ts";
import { type Supervisor, waitFor } from "./supervisor.ts";

export interface EnvStackOptions {
  /** Tasks to serve, each with its worker's session limit. */
  readonly tasks: ReadonlyArray<{ readonly name: string; readonly concurrency: number }>;
  /** Use this controller instead of starting one (its workers must already be registered). */
  readonly controllerUrl?: string;
  /** Port of a controller we start; 0 picks a free one. */
  readonly controllerPort?: number;
  /** Worker heartbeat period; short locally so the stack is ready quickly. @default 2000 */
  readonly heartbeatMs?: number;
  /** Restarts of a crashed env worker (a fresh worker registers with its next heartbeat, as a
   * replaced container does; its sessions end as lost and the rollout side retries them). @default 0 */
  readonly workerRestarts?: number;
  /** Bearer key of the controller's session API, for the readiness check. */
  readonly controllerToken?: string;
  /** The run's config file: the controller, env workers and env pools read it (`limits`, `tasks.mix`). */
  readonly configFile?: string;
  /** Restarts of a crashed controller, on the same port: workers re-register with their next heartbeat. @default 0 */
  readonly controllerRestarts?: number;
  /** The controller cancels sessions idle this long (a dead rollout worker's). @default the CLI's 240000 */
  readonly sessionIdleMs?: number;
  /**
   * Run one env pool manager per task (`agentrl env pool`, process driver, sized by the config
   * file's tasks.mix entry) instead of one fixed worker per task. Needs `configFile`.
   */
  readonly pools?: {
    /** Parent of each pool's state folder (pid files and worker logs, `<dir>/<task>/`). */
    readonly stateDir: string;
    /** Tasks whose pool keeps no worker when idle (minWorkers 0): not waited for. */
    readonly idleTasks?: readonly string[];
  };
}

/**
 * Starts the environment side of the embedded default as child processes: the controller and
 * one env pool per task (or one fixed `env serve` worker per task without `pools`), and waits
 * until every task has an ALIVE worker.
 * Returns the controller URL.
 */
export async function startEnvStack(supervisor: Supervisor, options: EnvStackOptions): Promise<string> {
  if (options.controllerUrl) return options.controllerUrl;
  const config = options.configFile ? ["--config", options.configFile] : [];
  const restarts = options.controllerRestarts ?? 0;
  // port 0: the controller binds a free port itself and keeps it through restarts (Supervisor)
  const port = options.controllerPort || 0;
  const idle = options.sessionIdleMs ? ["--session-idle-ms", String(options.sessionIdleMs)] : [];
  supervisor.start({
    name: "controller",
    args: ["controller", "--port", String(port), ...idle, ...config],
    maxRestarts: restarts,
  });
  const controllerUrl = await supervisor.guard(supervisor.urlOf("controller"));
  const heartbeatMs = String(options.heartbeatMs ?? 2_000);
  const pools = options.pools;
  if (pools && !options.configFile) throw new Error("startEnvStack: env pools need the run's configFile");
  for (const task of pools ? [] : options.tasks) {
    supervisor.start({
      name: `env-${task.name}`,
      args: [
        "env",
        "serve",
        task.name,
        "--controller",
        controllerUrl,
        "--concurrency",
        String(task.concurrency),
        "--heartbeat-ms",
        heartbeatMs,
        ...config,
      ],
      maxRestarts: options.workerRestarts ?? 0,
    });
  }
  // A pool keeps no state of its own (it adopts its running workers), so a crashed one is restarted.
  for (const task of pools ? options.tasks : []) {
    supervisor.start({
      name: `envpool-${task.name}`,
      args: [
        "env",
        "pool",
        "--controller",
        controllerUrl,
        "--task",
        task.name,
        ...config,
        "--state-dir",
        join(pools?.stateDir ?? "", task.name),
        "--heartbeat-ms",
        heartbeatMs,
      ],
      maxRestarts: options.workerRestarts ?? 0,
      // Closing stops its workers, each with a 5 s grace of its own.
      stopGraceMs: 15_000,
    });
  }
  const client = new ControllerClient({
    baseUrl: controllerUrl,
    maxRetries: 0,
    ...(options.controllerToken ? { token: options.controllerToken } : {}),
  });
  const awaited = options.tasks.filter((t) => !pools?.idleTasks?.includes(t.name));
  await supervisor.guard(
    waitFor(
      `env workers ${awaited.map((t) => t.name).join(", ")} to register`,
      async () => {
        const listing = await client.listWorkers();
        return awaited.every((t) =>
          Object.values(listing[t.name]?.workers ?? {}).some((worker) => worker.status === "ALIVE"),
        );
      },
      // With pools, two process start-ups (pool, then its worker) come before a registration.
      pools ? 300_000 : 120_000,
      supervisor.stopSignal,
    ),
  );
  return controllerUrl;
}

/**
 * After the supervisor has stopped the stack: stops any worker a pool left behind (a pool killed
 * while it was closing; its workers are detached so that a restarted pool adopts them), so no
 * `env serve` outlives the run. Returns how many it stopped (0 when the pools closed cleanly).
 */
export async function stopLeftoverPoolWorkers(
  stateDir: string,
  tasks: readonly string[],
  log: Logger,
): Promise<number> {
  const counts = await Promise.all(tasks.map((task) => stopListedWorkers(join(stateDir, task), task, log)));
  const stopped = counts.reduce((sum, n) => sum + n, 0);
  if (stopped > 0) log.warn({ stopped }, "stopped env workers their pools left running");
  return stopped;
}
