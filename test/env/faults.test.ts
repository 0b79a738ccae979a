import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { exampleTask } from "../../env-images/example/index.ts";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import { ControllerClient, EnvSessionLostError } from "../../shared/env/client.ts";
import { type RunningWorker, serveTask } from "../../shared/env/worker.ts";
import { freePort } from "../../shared/net.ts";
import { ListWorkersResponse } from "../../shared/protocol/envApi.ts";
import { call, countWorkers, errorBody, postJson, waitFor } from "./helpers.ts";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));
const children: ChildProcess[] = [];
const cleanups: Array<() => Promise<void>> = [];

afterEach(async () => {
  for (const child of children.splice(0))
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** Starts `agentrl env serve example` as a child process and resolves with its worker address. */
async function spawnWorker(controllerUrl: string): Promise<{ child: ChildProcess; address: string }> {
  const child = spawn(
    process.execPath,
    [
      "bin/agentrl.mjs",
      "env",
      "serve",
      "example",
      "--controller",
      controllerUrl,
      "--heartbeat-ms",
      "200",
      "--concurrency",
      "4",
    ],
    { cwd: repoRoot, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, AGENTRL_LOG_LEVEL: "error" } },
  );
  children.push(child);
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const address = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker did not start: ${stderr}`)), 30_000);
    lines.once("line", (line) => {
      clearTimeout(timer);
      resolve(String((JSON.parse(line) as { address: string }).address));
    });
    child.once("exit", (code) => reject(new Error(`worker exited with ${code}: ${stderr}`)));
  });
  return { child, address };
}

async function workersOf(controller: RunningController) {
  return ListWorkersResponse.parse(await (await fetch(`${controller.url}/api/list_workers`)).json());
}

describe("faults", () => {
  it("a worker killed mid-session becomes DEAD, its session ends with 502, new sessions go to the live worker", async () => {
    const controller = await startController({ port: 0, heartbeatTimeoutMs: 5_000 });
    cleanups.push(() => controller.close());
    const client = new ControllerClient({ baseUrl: controller.url, backoffMs: 20, maxRetries: 2 });
    // The victim is a real child process (SIGKILL); the survivor can live in this process.
    const first = await spawnWorker(controller.url);
    const survivor = await serveTask(exampleTask, { controllerUrl: controller.url, heartbeatMs: 200, concurrency: 4 });
    cleanups.push(() => survivor.close());
    await waitFor(async () => countWorkers(await client.listWorkers(), "ALIVE") === 2, 20_000, "two workers");

    // Equal free slots: two starts land on different workers.
    const a = await client.startSample("example", 1);
    const b = await client.startSample("example", 2);
    const listing = (await workersOf(controller)).example;
    const sessions = (await (await fetch(`${controller.url}/api/list_sessions`)).json()) as Record<
      string,
      { worker_id: number }
    >;
    const addressOf = (sessionId: number) => listing?.workers[String(sessions[String(sessionId)]?.worker_id)]?.address;
    expect(addressOf(a.sessionId)).not.toBe(addressOf(b.sessionId));
    const [victimSession, survivorSession] = addressOf(a.sessionId) === first.address ? [a, b] : [b, a];
    const survivorAddress = addressOf(survivorSession.sessionId);

    first.child.kill("SIGKILL");
    await new Promise((resolve) => first.child.once("exit", resolve));

    // Raw wire: a clear infrastructure status, not an agent outcome.
    const raw = await postJson(
      `${controller.url}/api/interact`,
      { messages: [call("add", { a: 1, b: 2 })] },
      { session_id: String(victimSession.sessionId) },
    );
    expect(raw.status).toBe(502);
    expect(await errorBody(raw)).toMatchObject({ reason: "worker_lost" });
    const deadWorker = Object.values((await workersOf(controller)).example?.workers ?? {}).find(
      (w) => w.address === first.address,
    );
    expect(deadWorker?.status).toBe("DEAD");
    // The session is gone: the client sees a retryable infrastructure error, never a score.
    const again = client.interact(victimSession.sessionId, call("add", { a: 1, b: 2 }));
    await expect(again).rejects.toBeInstanceOf(EnvSessionLostError);
    await expect(again).rejects.toMatchObject({ retryable: true });

    // The live worker keeps serving, and new sessions are routed to it.
    await expect(client.interact(survivorSession.sessionId, call("add", { a: 1, b: 2 }))).resolves.toMatchObject({
      status: "running",
    });
    for (let i = 0; i < 3; i++) {
      const fresh = await client.startSample("example", 10 + i);
      const now = (await (await fetch(`${controller.url}/api/list_sessions`)).json()) as Record<
        string,
        { worker_id: number }
      >;
      const workerId = now[String(fresh.sessionId)]?.worker_id;
      expect(listing?.workers[String(workerId)]?.address).toBe(survivorAddress);
    }
  });

  it("after a controller restart, workers re-register on their next heartbeat and orphaned sessions are cancelled", async () => {
    const heartbeatMs = 300;
    // Picked below the ephemeral range /proc reports; restartOn covers a port taken anyway.
    const port = await freePort();
    let controller = await startController({ port });
    const worker: RunningWorker = await serveTask(exampleTask, {
      controllerUrl: controller.url,
      heartbeatMs,
      concurrency: 4,
    });
    cleanups.push(() => worker.close());
    const client = new ControllerClient({ baseUrl: controller.url, backoffMs: 20, maxRetries: 2 });
    await waitFor(async () => countWorkers(await client.listWorkers(), "ALIVE") === 1, 5_000, "registration");
    await client.startSample("example", 3);
    expect(worker.sessionCount).toBe(1);

    await controller.close();
    controller = await restartOn(port);
    const restarted = controller;
    cleanups.push(() => restarted.close());
    const restartedAt = Date.now();
    await waitFor(
      async () => countWorkers(await client.listWorkers(), "ALIVE") === 1,
      20 * heartbeatMs,
      "re-registration",
    );
    const elapsed = Date.now() - restartedAt;
    // One heartbeat period plus scheduling slack for a busy CI machine.
    expect(elapsed).toBeLessThan(heartbeatMs * 8 + 2_000);
    // The session of the old controller is unknown now; reconciliation cancels it on the worker.
    await waitFor(() => worker.sessionCount === 0, 5_000, "orphan cancelled");
    await expect(client.startSample("example", 4)).resolves.toMatchObject({ status: "running" });
  });
});

/**
 * Starts a controller on the port its predecessor just closed. The port can be held for a moment
 * by someone else (CI saw EADDRINUSE here twice): another test process that picked it in between,
 * or, where the host's real ephemeral range differs from what /proc reports, a reconnecting
 * client's local port. A restarted controller in production is retried by its supervisor; here
 * it is retried for a few seconds.
 */
async function restartOn(port: number): Promise<RunningController> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      return await startController({ port });
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code !== "EADDRINUSE" || Date.now() > deadline) throw error;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}
