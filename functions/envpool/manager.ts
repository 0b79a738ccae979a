import { ControllerClient } from "../../shared/env/client.ts";
import type { Logger } from "../../shared/log.ts";
import type { WorkerInfo } from "../../shared/protocol/envApi.ts";
import type { DriverWorker, LaunchSpec, WorkerDriver } from "./driver.ts";
import { desiredWorkers, percentile } from "./policy.ts";

export interface PoolOptions {
  readonly task: string;
  readonly controllerUrl: string;
  /** Bearer key of the controller's API (AGENTRL_CONTROLLER_SECRET), when it requires one. */
  readonly controllerToken?: string;
  readonly driver: WorkerDriver;
  readonly minWorkers: number;
  readonly maxWorkers: number;
  /** Sessions per worker; forced to 1 when `exclusive`. */
  readonly concurrency: number;
  /** Retire a worker after it started this many sessions (forced to 1 when `exclusive`). */
  readonly maxEpisodes?: number;
  /** Retire a worker after this many seconds. */
  readonly maxAgeSeconds?: number;
  /** Idle ready workers kept beyond demand, so a new session never waits for a start. @default 0 */
  readonly warmWorkers?: number;
  /** One fresh worker per episode (concurrency 1, retired after its episode). @default false */
  readonly exclusive?: boolean;
  /** Time between two decisions. @default 1000 */
  readonly tickMs?: number;
  /** A launched worker not registered ALIVE by then is stopped and replaced. @default 120000 */
  readonly readyTimeoutMs?: number;
  /** A registered worker not ALIVE (COMA: no heartbeat, DEAD: unreachable) this long is replaced. @default 15000 */
  readonly unhealthyAfterMs?: number;
  /** Demand must stay below capacity this long before idle workers are drained. @default 30000 */
  readonly scaleDownAfterMs?: number;
  /** A draining worker still holding sessions after this long is stopped anyway. @default 600000 */
  readonly drainTimeoutMs?: number;
  /** This task's share of queued work (e.g. rollout-requests depth); read once per decision. */
  readonly pendingDemand?: () => Promise<number>;
  /** Sessions of this task the rollout workers can hold at once; queued work counts up to it (see `Demand.startable`). */
  readonly startableSessions?: number;
  readonly log: Logger;
}

/** States of a worker in the pool. */
export type PoolWorkerState = "starting" | "ready" | "draining" | "stopping";

export interface PoolStatus {
  readonly task: string;
  readonly driver: string;
  readonly desired: number;
  readonly workers: Record<PoolWorkerState, number>;
  readonly counters: {
    /** Workers launched. */
    launches: number;
    /** Drained for reaching maxEpisodes or maxAgeSeconds. */
    retirements: number;
    /** Idle workers drained because demand fell. */
    scaleDowns: number;
    /** Workers that died, stopped heartbeating or never came up, and were stopped/replaced. */
    replacements: number;
    /** Workers stopped (after draining, or as unhealthy). */
    stops: number;
    /** Launch or list calls the platform refused. */
    platformErrors: number;
  };
  /** Launch to first seen ALIVE at the controller, ms (resolution: one decision period). */
  readonly timeToReadyMs: { readonly count: number; readonly p50?: number; readonly max?: number };
}

interface Classified {
  readonly worker: DriverWorker;
  readonly info: WorkerInfo | undefined;
  readonly state: PoolWorkerState | "unhealthy";
  readonly why?: string;
}

/**
 * Keeps one task's env workers matched to demand through a {@link WorkerDriver}. Every decision
 * is derived from two listings read each period (the controller's workers and the driver's),
 * so the manager holds no state that a restart loses beyond its counters: a new manager adopts
 * the running workers and goes on.
 *
 * A worker is retired by draining: the controller routes it no new session, its running sessions
 * finish, then the manager stops it. Workers are launched with the reuse limits, so they drain
 * themselves exactly at the limit; the manager also drains adopted workers that exceed them.
 */
export class PoolManager {
  private readonly client: ControllerClient;
  private readonly spec: LaunchSpec;
  private readonly counters: PoolStatus["counters"] = {
    launches: 0,
    retirements: 0,
    scaleDowns: 0,
    replacements: 0,
    stops: 0,
    platformErrors: 0,
  };
  private readonly readyTimes: number[] = [];
  private readonly seenReady = new Set<string>();
  private readonly stopping = new Map<string, Promise<void>>();
  private readonly notAliveSince = new Map<string, number>();
  private readonly drainingSince = new Map<string, number>();
  private known = new Set<string>();
  private lastRejected: number | undefined;
  private surplusSince: number | undefined;
  private lastStatus: PoolStatus | undefined;
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly options: PoolOptions) {
    const exclusive = options.exclusive ?? false;
    if (!(options.minWorkers >= 0 && options.maxWorkers >= Math.max(1, options.minWorkers)))
      throw new RangeError(
        `need 0 <= minWorkers <= maxWorkers and maxWorkers >= 1, got ${options.minWorkers}..${options.maxWorkers}`,
      );
    this.spec = {
      concurrency: exclusive ? 1 : options.concurrency,
      ...(exclusive
        ? { maxEpisodes: 1 }
        : options.maxEpisodes !== undefined
          ? { maxEpisodes: options.maxEpisodes }
          : {}),
      ...(options.maxAgeSeconds !== undefined ? { maxAgeSeconds: options.maxAgeSeconds } : {}),
    };
    this.client = new ControllerClient({
      baseUrl: options.controllerUrl,
      maxRetries: 1,
      backoffMs: 100,
      ...(options.controllerToken ? { token: options.controllerToken } : {}),
    });
  }

  /** Starts deciding every tickMs (the first decision runs at once). */
  start(): void {
    const loop = async () => {
      if (this.closed) return;
      this.ticking = this.tick();
      await this.ticking;
      if (!this.closed) this.timer = setTimeout(() => void loop(), this.options.tickMs ?? 1_000);
    };
    void loop();
  }

  /** One decision: read both listings, then launch, drain, stop. Never throws. */
  async tick(): Promise<void> {
    try {
      await this.decide();
    } catch (error) {
      this.counters.platformErrors += 1;
      this.options.log.warn({ err: error, task: this.options.task }, "pool decision skipped");
    }
  }

  status(): PoolStatus {
    return this.lastStatus ?? this.snapshot(0, []);
  }

  private async decide(): Promise<void> {
    const { task, driver, log } = this.options;
    const now = Date.now();
    // A stop under way may finish while the listings are read: its worker then reads as stopped
    // or gone, which is what the stop wanted, not a death. Remember which stops were under way.
    const stoppedHere = new Set(this.stopping.keys());
    const beingStopped = (id: string) => stoppedHere.has(id) || this.stopping.has(id);
    const [listing, platform, pending] = await Promise.all([
      this.client.listWorkers(),
      driver.list(),
      this.options.pendingDemand?.().catch(() => 0) ?? Promise.resolve(0),
    ]);
    const entry = listing[task];
    const byAddress = new Map(Object.values(entry?.workers ?? {}).map((w) => [w.address, w] as const));
    const rejectedTotal = entry?.rejected ?? 0;
    // A restarted controller starts counting again from 0.
    const rejected = this.lastRejected === undefined ? 0 : Math.max(0, rejectedTotal - this.lastRejected);
    this.lastRejected = rejectedTotal;

    const live: Classified[] = [];
    const present = new Set<string>();
    for (const worker of platform) {
      present.add(worker.id);
      if (worker.state === "stopped") {
        if (!beingStopped(worker.id)) {
          this.counters.replacements += 1;
          log.warn({ decision: "replace", task, id: worker.id, why: "worker exited" }, "env worker died; replacing");
        }
        continue;
      }
      if (beingStopped(worker.id)) {
        live.push({ worker, info: undefined, state: "stopping" });
        continue;
      }
      live.push(this.classify(worker, worker.address ? byAddress.get(worker.address) : undefined, now));
    }
    // A worker we knew that vanished from the platform without us stopping it died too.
    for (const id of this.known)
      if (!present.has(id) && !beingStopped(id)) {
        this.counters.replacements += 1;
        log.warn({ decision: "replace", task, id, why: "worker gone from the platform" }, "env worker lost; replacing");
      }
    this.known = new Set(live.filter((c) => c.state !== "stopping").map((c) => c.worker.id));
    for (const id of [...this.notAliveSince.keys()]) if (!present.has(id)) this.notAliveSince.delete(id);
    for (const id of [...this.drainingSince.keys()]) if (!present.has(id)) this.drainingSince.delete(id);

    for (const c of live) {
      if (c.state === "unhealthy") {
        this.counters.replacements += 1;
        this.stopWorker(c.worker, `unhealthy: ${c.why}`, "replace");
      } else if (c.state === "draining" && c.info) {
        const since = this.drainingSince.get(c.worker.id) ?? now;
        this.drainingSince.set(c.worker.id, since);
        if (c.info.current === 0) this.stopWorker(c.worker, "drained: no session left", "stop");
        else if (now - since > (this.options.drainTimeoutMs ?? 600_000))
          this.stopWorker(c.worker, `still ${c.info.current} sessions after the drain timeout`, "stop");
      } else if (c.state === "ready" && c.info) {
        const why = this.retirementReason(c.info, c.worker, now);
        if (why) {
          this.counters.retirements += 1;
          await this.drain(c.worker, why, "retire");
        }
      }
    }

    const ready = live.filter((c) => c.state === "ready" && c.info && !c.info.draining);
    const starting = live.filter((c) => c.state === "starting");
    const inUse = ready.reduce((n, c) => n + (c.info?.current ?? 0), 0);
    const startable = this.options.startableSessions;
    const desired = desiredWorkers(
      { inUse, pending, rejected, ...(startable === undefined ? {} : { startable }) },
      {
        slotsPerWorker: this.spec.concurrency,
        minWorkers: this.options.minWorkers,
        maxWorkers: this.options.maxWorkers,
        warmWorkers: this.options.warmWorkers ?? 0,
      },
    );
    // A task no worker ever registered is unknown to the controller, which then answers 404, not
    // 406: demand is invisible, so keep one worker until the task is known.
    const visible = entry === undefined && live.length === 0 ? Math.max(desired, 1) : desired;
    const capacity = ready.length + starting.length;
    if (capacity < visible) {
      this.surplusSince = undefined;
      const reason = { inUse, pending, rejected, warm: this.options.warmWorkers ?? 0, capacity, desired: visible };
      await Promise.all(Array.from({ length: visible - capacity }, () => this.launch(reason)));
    } else if (capacity > desired) {
      this.surplusSince ??= now;
      if (now - this.surplusSince >= (this.options.scaleDownAfterMs ?? 30_000)) {
        const idle = ready
          .filter((c) => (c.info?.current ?? 0) === 0)
          .sort((a, b) => a.worker.launchedAt - b.worker.launchedAt);
        for (const c of idle.slice(0, capacity - desired)) {
          this.counters.scaleDowns += 1;
          await this.drain(c.worker, `scale down: ${capacity} workers, ${desired} wanted`, "scale-down");
        }
        this.surplusSince = undefined;
      }
    } else this.surplusSince = undefined;

    const status = this.snapshot(desired, live);
    if (JSON.stringify(status) !== JSON.stringify(this.lastStatus)) log.info({ pool: status }, "pool status");
    this.lastStatus = status;
  }

  private classify(worker: DriverWorker, info: WorkerInfo | undefined, now: number): Classified {
    if (!info) {
      const age = now - worker.launchedAt;
      if (worker.state === "running" && age > (this.options.readyTimeoutMs ?? 120_000))
        return { worker, info, state: "unhealthy", why: `not registered ${Math.round(age / 1000)} s after launch` };
      return { worker, info, state: "starting" };
    }
    if (info.status !== "ALIVE") {
      const since = this.notAliveSince.get(worker.id) ?? now;
      this.notAliveSince.set(worker.id, since);
      if (now - since > (this.options.unhealthyAfterMs ?? 15_000))
        return { worker, info, state: "unhealthy", why: `${info.status} for ${Math.round((now - since) / 1000)} s` };
      // Not routed to while COMA/DEAD; counted as starting so that no extra worker is launched yet.
      return { worker, info, state: info.draining ? "draining" : "starting" };
    }
    this.notAliveSince.delete(worker.id);
    if (!this.seenReady.has(worker.id)) {
      this.seenReady.add(worker.id);
      this.readyTimes.push(now - worker.launchedAt);
      if (this.readyTimes.length > 1000) this.readyTimes.shift();
    }
    return { worker, info, state: info.draining ? "draining" : "ready" };
  }

  private retirementReason(info: WorkerInfo, worker: DriverWorker, now: number): string | undefined {
    const { maxEpisodes, maxAgeSeconds } = this.spec;
    if (maxEpisodes !== undefined && (info.episodes ?? 0) >= maxEpisodes)
      return `max episodes reached (${info.episodes} >= ${maxEpisodes})`;
    const startedAt = info.started_at !== undefined ? info.started_at * 1000 : worker.launchedAt;
    if (maxAgeSeconds !== undefined && now - startedAt >= maxAgeSeconds * 1000)
      return `max age reached (${Math.round((now - startedAt) / 1000)} s >= ${maxAgeSeconds} s)`;
    return undefined;
  }

  private async launch(reason: Record<string, number>): Promise<void> {
    const { task, driver, log } = this.options;
    try {
      const worker = await driver.launch(this.spec);
      this.counters.launches += 1;
      this.known.add(worker.id);
      log.info({ decision: "launch", task, id: worker.id, address: worker.address, ...reason }, "env worker launched");
    } catch (error) {
      this.counters.platformErrors += 1;
      log.error({ err: error, decision: "launch", task }, "env worker launch failed");
    }
  }

  private async drain(worker: DriverWorker, why: string, decision: string): Promise<void> {
    const { task, log } = this.options;
    log.info({ decision, task, id: worker.id, address: worker.address, why }, "draining env worker");
    if (!worker.address) return;
    await this.client.drainWorker(worker.address).catch((error: unknown) => {
      log.warn({ err: error, id: worker.id }, "drain_worker failed; retried next period");
    });
  }

  private stopWorker(worker: DriverWorker, why: string, decision: string): void {
    if (this.stopping.has(worker.id)) return;
    const { task, driver, log } = this.options;
    log.info({ decision, task, id: worker.id, address: worker.address, why }, "stopping env worker");
    this.counters.stops += 1;
    // Its disappearance from the platform is then expected, not a death.
    this.known.delete(worker.id);
    const stop = driver
      .stop(worker.id, why)
      .catch((error: unknown) => {
        this.counters.platformErrors += 1;
        log.warn({ err: error, id: worker.id }, "stop failed; retried next period");
      })
      .finally(() => {
        this.stopping.delete(worker.id);
        this.seenReady.delete(worker.id);
      });
    this.stopping.set(worker.id, stop);
  }

  private snapshot(desired: number, live: readonly Classified[]): PoolStatus {
    const workers: Record<PoolWorkerState, number> = { starting: 0, ready: 0, draining: 0, stopping: 0 };
    for (const c of live) workers[c.state === "unhealthy" ? "stopping" : c.state] += 1;
    const p50 = percentile(this.readyTimes, 50);
    const max = percentile(this.readyTimes, 100);
    return {
      task: this.options.task,
      driver: this.options.driver.kind,
      desired,
      workers,
      counters: { ...this.counters },
      timeToReadyMs: {
        count: this.readyTimes.length,
        ...(p50 !== undefined ? { p50 } : {}),
        ...(max !== undefined ? { max } : {}),
      },
    };
  }

  /**
   * Stops deciding. `stopWorkers` (the default) stops every worker of the pool; without it the
   * workers keep running for the next manager to adopt.
   */
  async close(options: { stopWorkers?: boolean } = {}): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    await this.ticking;
    if (options.stopWorkers ?? true) {
      const workers = await this.options.driver.list().catch(() => []);
      for (const worker of workers) if (worker.state !== "stopped") this.stopWorker(worker, "pool closing", "stop");
    }
    await Promise.all(this.stopping.values());
  }
}
