import { afterEach, describe, expect, it } from "vitest";
import { startController } from "../../functions/controller/controller.ts";
import { createApp, listen, type RunningServer } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { call, postJson, waitFor } from "./helpers.ts";

const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A scripted worker whose answers arrive in a chosen order: start_sample answers after
 * `startDelayMs`, get_sessions after `listDelayMs` with the sessions it held when *asked*.
 */
async function scriptedWorker(
  startDelayMs: number,
  listDelayMs: number,
): Promise<RunningServer & { held: Set<number> }> {
  const held = new Set<number>();
  const app = createApp(createLogger({ role: "scripted-worker" }));
  app.post("/api/start_sample", async (c) => {
    const { session_id } = (await c.req.json()) as { session_id: number };
    await sleep(startDelayMs);
    held.add(session_id);
    return c.json({
      messages: [{ role: "user", content: "go" }],
      tools: [],
      status: "running",
      finish: false,
      reward: 0,
      metric: {},
    });
  });
  app.get("/api/get_sessions", async (c) => {
    const snapshot = Object.fromEntries([...held].map((id) => [String(id), 0]));
    await sleep(listDelayMs);
    return c.json(snapshot);
  });
  app.post("/api/interact", (c) => c.json({ messages: [], finish: false, reward: 0, status: "running", metrics: {} }));
  app.post("/api/cancel", async (c) => {
    const { session_id } = (await c.req.json()) as { session_id: number };
    held.delete(session_id);
    return c.json({ session_id });
  });
  const server = await listen(app);
  return Object.assign(server, { held });
}

/** A controller (no periodic reconciliation) and a scripted worker; `beat` sends its heartbeat. */
async function controllerWithScriptedWorker(startDelayMs: number, listDelayMs: number) {
  const controller = await startController({ port: 0, reconcileIntervalMs: 0 });
  closers.push(() => controller.close());
  const worker = await scriptedWorker(startDelayMs, listDelayMs);
  closers.push(() => worker.close());
  const beat = () =>
    postJson(`${controller.url}/api/receive_heartbeat`, {
      name: "scripted",
      address: `${worker.url}/api`,
      concurrency: 4,
      indices: [0],
    });
  return { controller, worker, beat };
}

describe("reconciliation race", () => {
  it("keeps a session whose start answer arrived after the worker listed its sessions", async () => {
    const { controller, worker, beat } = await controllerWithScriptedWorker(300, 600);
    expect((await beat()).status).toBe(200);
    await sleep(700); // the registration's own reconciliation has finished

    // start_sample is in flight when a heartbeat triggers reconciliation; the worker snapshots
    // its (still empty) table, answers start, and only then does the empty listing arrive.
    const start = postJson(`${controller.url}/api/start_sample`, { name: "scripted", index: 0 });
    await sleep(100);
    expect((await beat()).status).toBe(200);
    const started = await start;
    expect(started.status).toBe(200);
    const sessionId = String(started.headers.get("session_id"));
    await sleep(800); // the stale listing has been applied by now

    const sessions = (await (await fetch(`${controller.url}/api/list_sessions`)).json()) as Record<string, unknown>;
    expect(Object.keys(sessions)).toEqual([sessionId]);
    const turn = await postJson(
      `${controller.url}/api/interact`,
      { messages: [call("go", {})] },
      { session_id: sessionId },
    );
    expect(turn.status).toBe(200);
    expect(worker.held.has(Number(sessionId))).toBe(true);
  });

  it("drops a session the worker lost once a listing taken after its last answer omits it", async () => {
    const { controller, worker, beat } = await controllerWithScriptedWorker(0, 0);
    await beat();
    const started = await postJson(`${controller.url}/api/start_sample`, { name: "scripted", index: 0 });
    const sessionId = String(started.headers.get("session_id"));
    worker.held.clear(); // e.g. the worker restarted at the same address
    await sleep(20);
    await beat();
    await waitFor(
      async () =>
        Object.keys((await (await fetch(`${controller.url}/api/list_sessions`)).json()) as object).length === 0,
      5_000,
      "drop",
    );
    const turn = await postJson(
      `${controller.url}/api/interact`,
      { messages: [call("go", {})] },
      { session_id: sessionId },
    );
    expect(turn.status).toBe(404);
  });
});
