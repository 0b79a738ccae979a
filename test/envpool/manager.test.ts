import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import type { DriverWorker, LaunchSpec, WorkerDriver } from "../../functions/envpool/driver.ts";
import { PoolManager } from "../../functions/envpool/manager.ts";
import { createLogger } from "../../shared/log.ts";

/**
 * The pool manager's bookkeeping against a driver whose timing the test sets: a real controller
 * (in process, no worker registered) and a platform of one worker that never registers, so the
 * manager stops it as unhealthy. What the test controls is when that stop finishes.
 */
const log = createLogger({ role: "envpool-manager-test" });
let controller: RunningController;

beforeAll(async () => {
  controller = await startController({ port: 0, log });
});
afterAll(async () => {
  await controller?.close();
});

/**
 * One worker, w1. Its stop stays under way until the platform is next listed and finishes during
 * that listing, which reads w1 as `afterStop`; later listings hold only the workers launched since.
 */
class StopFinishesWhileListed implements WorkerDriver {
  readonly kind = "scripted";
  stops = 0;
  private readonly first: DriverWorker = { id: "w1", address: undefined, state: "running", launchedAt: 0 };
  private readonly launched: DriverWorker[] = [];
  private phase: "running" | "stopping" | "gone" = "running";
  private finishStop: (() => void) | undefined;

  constructor(private readonly afterStop: "stopped" | "gone" | "running") {}

  async launch(_spec: LaunchSpec): Promise<DriverWorker> {
    const worker: DriverWorker = {
      id: `w${this.launched.length + 2}`,
      address: undefined,
      state: "pending",
      launchedAt: Date.now(),
    };
    this.launched.push(worker);
    return worker;
  }

  stop(): Promise<void> {
    this.stops += 1;
    this.phase = "stopping";
    return new Promise((resolve) => {
      this.finishStop = resolve;
    });
  }

  async list(): Promise<DriverWorker[]> {
    if (this.phase === "running") return [this.first, ...this.launched];
    if (this.phase === "gone") return [...this.launched];
    // The stop ends now, while the manager still awaits the controller's listing.
    this.phase = "gone";
    this.finishStop?.();
    if (this.afterStop === "gone") return [...this.launched];
    if (this.afterStop === "stopped") return [{ ...this.first, state: "stopped" }, ...this.launched];
    return [this.first, ...this.launched]; // read just before the process ended
  }
}

describe("pool manager", () => {
  it.each(["stopped", "gone", "running"] as const)(
    "counts a worker it stopped as stopped, not died, when the stop finishes while the platform is listed (%s)",
    async (afterStop) => {
      const driver = new StopFinishesWhileListed(afterStop);
      const manager = new PoolManager({
        task: "example",
        controllerUrl: controller.url,
        driver,
        minWorkers: 0,
        maxWorkers: 1,
        concurrency: 1,
        readyTimeoutMs: 0,
        log,
      });
      await manager.tick(); // never registered: unhealthy, stopped (one replacement)
      expect(manager.status().counters).toMatchObject({ replacements: 1, stops: 1 });
      await manager.tick(); // the stop finishes during this decision's listing
      await manager.tick(); // and the worker is no longer listed
      // (a task the controller does not know keeps one worker: the third decision launches it)
      expect(manager.status().counters).toEqual({
        launches: 1,
        retirements: 0,
        scaleDowns: 0,
        replacements: 1,
        stops: 1,
        platformErrors: 0,
      });
      expect(driver.stops).toBe(1);
      await manager.close({ stopWorkers: false });
    },
  );
});
