/**
 * What the pool manager asks of a place that runs env workers (child processes here, ECS tasks
 * in AWS). A driver keeps no state the manager depends on: `list()` reads the truth from the
 * platform (pid files and the process table, ECS ListTasks), so a restarted manager adopts what
 * is running.
 */

/** How to start one worker. */
export interface LaunchSpec {
  /** Sessions served at once (1 for exclusive sessions). */
  readonly concurrency: number;
  /** The worker drains itself after starting this many sessions. */
  readonly maxEpisodes?: number;
  /** The worker drains itself after this many seconds. */
  readonly maxAgeSeconds?: number;
}

/** A worker as the platform reports it. */
export interface DriverWorker {
  /** Stable id on the platform: `pid:<n>` for a process, the task ARN for ECS. */
  readonly id: string;
  /** Address the worker announces to the controller (`http://host:port/api`), once known. */
  readonly address: string | undefined;
  /** `pending`: provisioning; `running`: the process or container runs; `stopped`: gone. */
  readonly state: "pending" | "running" | "stopped";
  /** Launch time, ms since the epoch. */
  readonly launchedAt: number;
}

export interface WorkerDriver {
  /** `process` or `ecs`: logs and metrics carry it. */
  readonly kind: string;
  /** Starts one worker; resolves once the platform accepted it (not when it is ready). */
  launch(spec: LaunchSpec): Promise<DriverWorker>;
  /** Stops a worker (idempotent); `reason` is recorded where the platform keeps one. */
  stop(id: string, reason: string): Promise<void>;
  /** Every worker of this pool the platform still knows, including ones a previous manager launched. */
  list(): Promise<DriverWorker[]>;
}
