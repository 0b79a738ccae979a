import { afterEach, describe, expect, it } from "vitest";
import { exampleActivity, exampleNumbers, exampleTask } from "../../env-images/example/index.ts";
import { EnvCapacityError, EnvSessionLostError, EnvTaskNotServedError } from "../../shared/env/client.ts";
import { serveTask } from "../../shared/env/worker.ts";
import { call, countWorkers, errorBody, jsonRecord, postJson, type Stack, startStack, waitFor } from "./helpers.ts";

let stack: Stack | undefined;
afterEach(async () => {
  await stack?.close();
  stack = undefined;
});

describe("bad input", () => {
  it("answers malformed bodies and headers with 400 naming the field", async () => {
    stack = await startStack([{ concurrency: 4 }]);
    const api = `${stack.controller.url}/api`;

    const noName = await postJson(`${api}/start_sample`, { index: 1 });
    expect(noName.status).toBe(400);
    expect((await errorBody(noName)).issues?.map((i) => i.path)).toEqual(["name"]);

    const badIndex = await postJson(`${api}/start_sample`, { name: "example", index: "one" });
    expect(badIndex.status).toBe(400);
    expect((await errorBody(badIndex)).issues?.[0]?.path).toBe("index");

    const notJson = await postJson(`${api}/start_sample`, "{not json");
    expect(notJson.status).toBe(400);
    expect((await errorBody(notJson)).error).toMatch(/not valid JSON/);

    const noHeader = await postJson(`${api}/interact`, { messages: [call("add", { a: 1, b: 2 })] });
    expect(noHeader.status).toBe(400);
    expect((await errorBody(noHeader)).issues?.[0]?.path).toBe("session_id");

    const badHeader = await postJson(
      `${api}/interact`,
      { messages: [call("add", { a: 1, b: 2 })] },
      { session_id: "abc" },
    );
    expect(badHeader.status).toBe(400);

    const badMessage = await postJson(
      `${api}/interact`,
      { messages: [{ role: "assistant", tool_calls: [{ id: "x" }] }] },
      { session_id: "1" },
    );
    expect(badMessage.status).toBe(400);
    const paths = (await errorBody(badMessage)).issues?.map((i) => i.path);
    expect(paths).toContain("messages[0].tool_calls[0].type");

    const outOfRange = await postJson(`${api}/start_sample`, { name: "example", index: 5000 });
    expect(outOfRange.status).toBe(400);
    expect((await errorBody(outOfRange)).issues?.[0]?.path).toBe("index");

    const unknownTask = await postJson(`${api}/start_sample`, { name: "nope", index: 0 });
    expect(unknownTask.status).toBe(404);
    expect((await errorBody(unknownTask)).error).toMatch(/no worker has registered task "nope"/);
    // A task no worker serves may yet be registered by one starting: the client reads it as
    // capacity to wait for (bounded by the caller), not as a malformed request.
    const notServed = await stack.client.startSample("nope", 0).catch((e: unknown) => e);
    expect(notServed).toBeInstanceOf(EnvTaskNotServedError);
    expect(notServed).toMatchObject({ retryable: true, status: 404 });

    // The worker endpoints validate too.
    const worker = `${stack.workers[0]?.address}`;
    const noSession = await postJson(`${worker}/start_sample`, { index: 1 });
    expect(noSession.status).toBe(400);
    expect((await errorBody(noSession)).issues?.[0]?.path).toBe("session_id");
  });

  it("turns bad tool calls into error observations with the matching status, leaving other sessions alone", async () => {
    stack = await startStack([{ concurrency: 8 }]);
    const { client } = stack;
    const healthy = await client.startSample("example", 5);

    const cases = [
      {
        message: call("delete_everything", {}),
        status: "agent invalid action",
        text: /unknown tool "delete_everything"/,
      },
      { message: call("add", "{a: 1"), status: "agent validation failed", text: /not valid JSON/ },
      {
        message: call("add", { a: "one", b: 2 }),
        status: "agent validation failed",
        text: /invalid arguments for add: a:/,
      },
      {
        message: { role: "assistant" as const, content: "I think it is 7", tool_calls: undefined },
        status: "agent validation failed",
        text: /No tool was called/,
      },
    ];
    for (const { message, status, text } of cases) {
      const sample = await client.startSample("example", 1);
      const turn = await client.interact(sample.sessionId, message);
      expect(turn.status).toBe(status);
      expect(turn.finish).toBe(true);
      expect(turn.reward).toBe(0);
      expect(turn.messages[0]?.content).toMatch(text);
      // The finished session is gone on both sides.
      await expect(client.interact(sample.sessionId, call("add", { a: 1, b: 1 }))).rejects.toBeInstanceOf(
        EnvSessionLostError,
      );
    }

    // The untouched session still plays to the end and earns its reward.
    const [x, y, z] = exampleNumbers(5);
    expect((await client.interact(healthy.sessionId, call("add", { a: x, b: y }))).messages[0]?.content).toBe(
      String(x + y),
    );
    const done = await client.interact(healthy.sessionId, call("answer", { value: x + y + z }));
    expect(done).toMatchObject({ status: "completed", finish: true, reward: 1 });
    expect(stack.workers[0]?.sessionCount).toBe(0);
  });
});

describe("capacity and routing", () => {
  it("routes to the worker with the most free slots and answers 406 when all are full", async () => {
    stack = await startStack([{ concurrency: 3 }, { concurrency: 1 }]);
    const { client } = stack;
    const started = [];
    for (let i = 0; i < 4; i++) started.push(await client.startSample("example", i));
    const perWorker = [stack.workers[0]?.sessionCount, stack.workers[1]?.sessionCount];
    expect(perWorker).toEqual([3, 1]);
    await expect(client.startSample("example", 9)).rejects.toBeInstanceOf(EnvCapacityError);

    // A worker asked directly beyond its limit answers 406 too.
    const direct = await postJson(`${stack.workers[1]?.address}/start_sample`, { index: 0, session_id: 42 });
    expect(direct.status).toBe(406);

    await client.cancel(started[0]?.sessionId ?? -1);
    await client.cancel(started[0]?.sessionId ?? -1); // idempotent
    expect(stack.workers[0]?.sessionCount).toBe(2);
    await expect(client.startSample("example", 9)).resolves.toMatchObject({ status: "running" });
  });

  it("stops routing to a worker whose heartbeat is stale (COMA) and revives it on the next heartbeat", async () => {
    stack = await startStack([], { heartbeatTimeoutMs: 800 });
    // A worker without automatic heartbeats: we beat for it by hand.
    const silent = await serveTask(exampleTask, { concurrency: 2 });
    try {
      const beat = () =>
        postJson(`${stack?.controller.url}/api/receive_heartbeat`, {
          name: "example",
          address: silent.address,
          concurrency: 2,
          indices: Array.from({ length: 1100 }, (_, i) => i),
        });
      expect((await beat()).status).toBe(200);
      await stack.client.startSample("example", 0);
      await waitFor(async () => countWorkers(await stack!.client.listWorkers(), "COMA") === 1, 5_000, "COMA");
      await expect(stack.client.startSample("example", 1)).rejects.toBeInstanceOf(EnvCapacityError);
      expect((await beat()).status).toBe(200);
      expect(countWorkers(await stack.client.listWorkers(), "ALIVE")).toBe(1);
      await expect(stack.client.startSample("example", 1)).resolves.toMatchObject({ status: "running" });
    } finally {
      await silent.close();
    }
  });
});

describe("session lifetime", () => {
  it("expires idle sessions on the worker and on the controller", async () => {
    stack = await startStack([{ concurrency: 4, idleTimeoutMs: 500 }], { sessionIdleTimeoutMs: 600 });
    const { client } = stack;
    const sample = await client.startSample("example", 2);
    expect(stack.workers[0]?.sessionCount).toBe(1);
    await waitFor(() => stack?.workers[0]?.sessionCount === 0, 5_000, "worker expiry");
    await waitFor(
      async () => Object.keys(await jsonRecord(await fetch(`${stack?.controller.url}/api/list_sessions`))).length === 0,
      5_000,
      "controller expiry",
    );
    await expect(client.interact(sample.sessionId, call("add", { a: 1, b: 1 }))).rejects.toBeInstanceOf(
      EnvSessionLostError,
    );
  });

  it("cancel aborts a running tool call: the work stops and the turn ends as cancelled", async () => {
    stack = await startStack([{ concurrency: 4 }]);
    const { client } = stack;
    const aborted = exampleActivity.abortedWaits;
    const sample = await client.startSample("example", 3);
    const other = await client.startSample("example", 4);
    const started = Date.now();
    const turn = client.interact(sample.sessionId, call("wait", { ms: 60_000 }));
    await waitFor(() => exampleActivity.runningWaits === 1, 5_000, "wait tool to start");
    await client.cancel(sample.sessionId);
    const result = await turn;
    expect(result).toMatchObject({ status: "cancelled", finish: true });
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(exampleActivity.runningWaits).toBe(0);
    expect(exampleActivity.abortedWaits).toBe(aborted + 1);
    expect(stack.workers[0]?.sessionCount).toBe(1);
    // The other session is unaffected.
    await expect(client.interact(other.sessionId, call("add", { a: 2, b: 2 }))).resolves.toMatchObject({
      status: "running",
    });
  });

  it("reconciles: sessions a worker holds that the controller does not know are cancelled", async () => {
    stack = await startStack([{ concurrency: 4 }], { reconcileIntervalMs: 100 });
    const worker = stack.workers[0];
    const kept = await stack.client.startSample("example", 8);
    const orphan = await postJson(`${worker?.address}/start_sample`, { index: 7, session_id: 123 });
    expect(orphan.status).toBe(200);
    // The next reconcile (every 100 ms) may already have run: wait for its result, not its start.
    await waitFor(() => worker?.sessionCount === 1, 5_000, "orphan cancelled");
    const gone = await postJson(`${worker?.address}/interact`, {
      session_id: 123,
      messages: [call("add", { a: 1, b: 1 })],
    });
    expect(gone.status).toBe(404);
    await expect(stack.client.interact(kept.sessionId, call("add", { a: 1, b: 1 }))).resolves.toMatchObject({
      status: "running",
    });
  });

  it("calculate_overall aggregates success, reward and statuses", async () => {
    stack = await startStack([{ concurrency: 1 }]);
    const response = await postJson(`${stack.controller.url}/api/calculate_overall`, {
      name: "example",
      results: [
        { status: "completed", reward: 1 },
        { status: "completed", reward: 0 },
        { status: "task limit reached", reward: 0 },
        { status: "agent invalid action", reward: 0 },
      ],
    });
    expect(response.status).toBe(200);
    expect(await jsonRecord(response)).toEqual({
      total: 4,
      success_rate: 0.25,
      average_reward: 0.25,
      status_counts: { completed: 2, "task limit reached": 1, "agent invalid action": 1 },
    });
  });
});
