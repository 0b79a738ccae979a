import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exampleNumbers } from "../../env-images/example/index.ts";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import { PoolManager, type PoolOptions } from "../../functions/envpool/manager.ts";
import { ProcessDriver, stopListedWorkers } from "../../functions/envpool/processDriver.ts";
import { ControllerClient, EnvCapacityError } from "../../shared/env/client.ts";
import { createLogger } from "../../shared/log.ts";
import { processRuns } from "../../shared/processes.ts";
import { SessionInfo } from "../../shared/protocol/envApi.ts";
import { call, waitFor } from "../env/helpers.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The pool manager with the process driver: real `agentrl env serve example` child processes
 * registering with an in-process controller. Each worker start costs a CLI start-up (about 3 s
 * of CPU), so the scenarios launch as few as they can; waits are long because a shared machine
 * can make one start take 20 s.
 */
const SLOW = 120_000;
const log = createLogger({ role: "envpool-test" });
let controller: RunningController;
let client: ControllerClient;

beforeAll(async () => {
  controller = await startController({ port: 0, heartbeatTimeoutMs: 4_000, forgetAfterMs: 20_000, log });
  client = new ControllerClient({ baseUrl: controller.url, maxRetries: 0 });
});
afterAll(async () => {
  await controller?.close();
});

function pool(overrides: Partial<PoolOptions> & { stateDir: string }): { manager: PoolManager; driver: ProcessDriver } {
  const driver = new ProcessDriver({
    task: "example",
    controllerUrl: controller.url,
    stateDir: overrides.stateDir,
    heartbeatMs: 300,
    log,
  });
  const manager = new PoolManager({
    task: "example",
    controllerUrl: controller.url,
    driver,
    minWorkers: 1,
    maxWorkers: 2,
    concurrency: 2,
    tickMs: 150,
    scaleDownAfterMs: 600,
    unhealthyAfterMs: 10_000,
    log,
    ...overrides,
  });
  return { manager, driver };
}

/** Starts a session (waiting while every worker is full or starting); returns it with its worker id. */
async function startSession(index: number): Promise<{ sessionId: number; workerId: number }> {
  for (;;) {
    try {
      const started = await client.startSample("example", index);
      const sessions = await (await fetch(`${controller.url}/api/list_sessions`)).json();
      const info = SessionInfo.parse((sessions as Record<string, unknown>)[String(started.sessionId)]);
      return { sessionId: started.sessionId, workerId: info.worker_id };
    } catch (error) {
      // 406 (no free slot yet) and 404 (no worker registered yet) mean: the pool is catching up.
      if (!(error instanceof EnvCapacityError) && !String(error).includes("no worker has registered")) throw error;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function answer(sessionId: number, index: number): Promise<string> {
  const [a, b, c] = exampleNumbers(index);
  const turn = await client.interact(sessionId, call("answer", { value: a + b + c }));
  expect(turn.finish).toBe(true);
  return turn.status;
}

describe("env pool with the process driver", () => {
  it(
    "retires workers after --max-episodes 3: twelve episodes on at least four workers, none lost",
    async () => {
      // A warm worker is started while the current one serves its last episodes.
      const { manager } = pool({ stateDir: tempDir("envpool-retire-"), maxEpisodes: 3, warmWorkers: 1 });
      manager.start();
      try {
        const workers = new Set<number>();
        const statuses: string[] = [];
        // Two episodes at a time, so a draining worker still finishes a running session.
        for (let i = 0; i < 12; i += 2) {
          const pair = await Promise.all([startSession(i), startSession(i + 1)]);
          for (const s of pair) workers.add(s.workerId);
          statuses.push(...(await Promise.all(pair.map((s, k) => answer(s.sessionId, i + k)))));
        }
        expect(statuses).toEqual(Array(12).fill("completed"));
        expect(workers.size).toBeGreaterThanOrEqual(4);
        await waitFor(() => manager.status().counters.stops >= 3, 20_000, "retired workers to stop");
        const status = manager.status();
        expect(status.counters.launches).toBeGreaterThanOrEqual(4);
        expect(status.counters.replacements).toBe(0);
        expect(status.counters.retirements + status.counters.stops).toBeGreaterThanOrEqual(3);
        expect(status.timeToReadyMs.count).toBeGreaterThanOrEqual(4);
      } finally {
        await manager.close();
      }
    },
    SLOW,
  );

  it(
    "scales up under load, replaces a SIGKILLed worker, scales down when idle, and is adopted by a new manager",
    async () => {
      const stateDir = tempDir("envpool-scale-");
      const options = { stateDir, minWorkers: 1, maxWorkers: 2, concurrency: 1 };
      const first = pool(options);
      first.manager.start();
      let second: PoolManager | undefined;
      try {
        // Two sessions held open on one-slot workers: the 406s and sessions in use grow the pool to 2.
        const held = await Promise.all([0, 1].map((i) => startSession(i)));
        expect(new Set(held.map((s) => s.workerId)).size).toBe(2);
        expect(first.manager.status().counters.launches).toBe(2);

        // Kill the worker of the first session: it is replaced and the session ends as lost (502), never scored.
        const listing = await client.listWorkers();
        const victimAddress = listing.example?.workers[String(held[0]?.workerId)]?.address;
        const victim = (await first.driver.list()).find((w) => w.address === victimAddress);
        if (!victim) throw new Error("no running worker holds the first session");
        process.kill(Number(victim.id.slice("pid:".length)), "SIGKILL");
        await waitFor(() => first.manager.status().counters.replacements >= 1, 20_000, "the dead worker to be noticed");
        const lost = await answer(held[0]?.sessionId ?? -1, 0).then(String, (error: unknown) => String(error));
        expect(lost).toMatch(/lost|502/);
        // Load again: a new session needs a second worker, which the pool launches in place of the dead one.
        const next = await startSession(2);
        expect(await answer(held[1]?.sessionId ?? -1, 1)).toBe("completed");
        expect(await answer(next.sessionId, 2)).toBe("completed");
        expect(first.manager.status().counters.launches).toBe(3);

        // Idle now: drained back down to minWorkers.
        await waitFor(
          () => {
            const s = first.manager.status();
            return (
              s.workers.ready === 1 && s.workers.starting === 0 && s.workers.draining === 0 && s.workers.stopping === 0
            );
          },
          60_000,
          "the pool to scale down to one worker",
        );
        expect(first.manager.status().counters.scaleDowns).toBeGreaterThanOrEqual(1);

        // A new manager on the same state folder adopts the running worker instead of launching one.
        await first.manager.close({ stopWorkers: false });
        const remaining = (await first.driver.list()).filter((w) => w.state === "running");
        expect(remaining).toHaveLength(1);
        second = pool(options).manager;
        await second.tick();
        expect(second.status().workers.ready).toBe(1);
        expect(second.status().counters.launches).toBe(0);
        const again = await startSession(5);
        expect(await answer(again.sessionId, 5)).toBe("completed");
      } finally {
        await first.manager.close();
        await second?.close();
      }
    },
    SLOW,
  );

  it(
    "stops the workers a pool left listed when it died without closing, and only those",
    async () => {
      const stateDir = tempDir("envpool-leftover-");
      // A pool that dies (SIGKILL while closing) leaves its detached workers running, listed.
      const { driver } = pool({ stateDir });
      const worker = await driver.launch({ concurrency: 1 });
      const pid = Number(worker.id.replace("pid:", ""));
      expect(processRuns(pid)).toBe(true);
      // The worker binds a free port itself; its address is known once it announced it.
      expect(worker.address).toBeUndefined();
      const args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
      expect(args[args.indexOf("--port") + 1]).toBe("0");
      let address: string | undefined;
      await waitFor(
        async () => {
          address = (await driver.list()).find((w) => w.id === worker.id)?.address;
          return address !== undefined;
        },
        60_000,
        "the worker's announced address",
      );
      const registered = async () =>
        Object.values((await client.listWorkers()).example?.workers ?? {}).map((w) => w.address);
      await waitFor(
        async () => (await registered()).includes(address as string),
        30_000,
        "the worker to register there",
      );
      expect(new URL(address as string).port).not.toBe("0");
      expect(await stopListedWorkers(stateDir, "other-task", log)).toBe(0);
      expect(processRuns(pid)).toBe(true);
      expect(await stopListedWorkers(stateDir, "example", log)).toBe(1);
      expect(processRuns(pid)).toBe(false);
      expect(await driver.list()).toEqual([]);
      expect(await stopListedWorkers(stateDir, "example", log)).toBe(0);
    },
    SLOW,
  );

  it(
    "stops a worker whose pid file was cut short, by the pid in its name, and never a process that is not its worker",
    async () => {
      const stateDir = tempDir("envpool-cut-short-");
      const { driver } = pool({ stateDir });
      const worker = await driver.launch({ concurrency: 1 });
      const pid = Number(worker.id.replace("pid:", ""));
      // a pool killed while writing it (an older version truncated before writing) left it empty
      writeFileSync(join(stateDir, `${pid}.json`), "");
      // and one naming this test's own process, which is no env worker of the task
      writeFileSync(join(stateDir, `${process.pid}.json`), "{");
      expect(await stopListedWorkers(stateDir, "example", log)).toBe(1);
      expect(processRuns(pid)).toBe(false);
      expect(readdirSync(stateDir).filter((name) => name.endsWith(".json"))).toEqual([]);
    },
    SLOW,
  );

  it(
    "gives each exclusive episode a fresh worker, hidden behind a warm pool",
    async () => {
      const { manager } = pool({ stateDir: tempDir("envpool-excl-"), exclusive: true, warmWorkers: 1, maxWorkers: 2 });
      manager.start();
      try {
        await waitFor(() => manager.status().workers.ready >= 1, 60_000, "a warm worker");
        const workers: number[] = [];
        for (let i = 0; i < 2; i++) {
          const session = await startSession(i);
          workers.push(session.workerId);
          expect(await answer(session.sessionId, i)).toBe("completed");
        }
        expect(new Set(workers).size).toBe(2);
        await waitFor(() => manager.status().counters.stops >= 2, 20_000, "used workers to stop");
        expect(manager.status().counters.launches).toBeGreaterThanOrEqual(3);
      } finally {
        await manager.close();
      }
    },
    SLOW,
  );
});
