import { ControllerClient } from "../../shared/env/client.ts";
import { freePort, type Supervisor, waitFor } from "./supervisor.ts";

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
  /** The run's config file: the controller and env workers read their `limits` from it. */
  readonly configFile?: string;
  /** Restarts of a crashed controller, on the same port: workers re-register with their next heartbeat. @default 0 */
  readonly controllerRestarts?: number;
  /** The controller cancels sessions idle this long (a dead rollout worker's). @default the CLI's 240000 */
  readonly sessionIdleMs?: number;
}

/**
 * Starts the environment side of the embedded default as child processes: the controller and
 * one `env serve` worker per task, and waits until every worker is registered and ALIVE.
 * Returns the controller URL.
 */
export async function startEnvStack(supervisor: Supervisor, options: EnvStackOptions): Promise<string> {
  if (options.controllerUrl) return options.controllerUrl;
  const config = options.configFile ? ["--config", options.configFile] : [];
  const restarts = options.controllerRestarts ?? 0;
  const port = options.controllerPort || (restarts > 0 ? await freePort() : 0);
  const idle = options.sessionIdleMs ? ["--session-idle-ms", String(options.sessionIdleMs)] : [];
  supervisor.start({
    name: "controller",
    args: ["controller", "--port", String(port), ...idle, ...config],
    maxRestarts: restarts,
  });
  const controllerUrl = await supervisor.guard(supervisor.urlOf("controller"));
  const heartbeatMs = String(options.heartbeatMs ?? 2_000);
  for (const task of options.tasks) {
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
  const client = new ControllerClient({
    baseUrl: controllerUrl,
    maxRetries: 0,
    ...(options.controllerToken ? { token: options.controllerToken } : {}),
  });
  await supervisor.guard(
    waitFor(
      `env workers ${options.tasks.map((t) => t.name).join(", ")} to register`,
      async () => {
        const listing = await client.listWorkers();
        return options.tasks.every((t) =>
          Object.values(listing[t.name]?.workers ?? {}).some((worker) => worker.status === "ALIVE"),
        );
      },
      120_000,
    ),
  );
  return controllerUrl;
}
