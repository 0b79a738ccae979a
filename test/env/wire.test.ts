import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { exampleNumbers } from "../../env-images/example/index.ts";
import { jsonRecord, postJson, type Stack, startStack } from "./helpers.ts";

/**
 * Drives the controller exactly as AgentRL's trainer and AgentBench FC clients do, with raw
 * fetch and the reference's body shapes and headers (agentrl-reference.md section 2) — not
 * through our client, so a drift in our client cannot hide a drift on the wire.
 */
let stack: Stack;
let api: string;
beforeAll(async () => {
  stack = await startStack([{ concurrency: 4 }]);
  api = `${stack.controller.url}/api`;
});
afterAll(async () => {
  await stack.close();
});

describe("AgentRL wire compatibility", () => {
  it("start_sample -> session_id header; interact -> only new messages; cancel is idempotent", async () => {
    const index = 1000;
    // AgentRL's evaluator also sends `custom_task: null`.
    const start = await fetch(`${api}/start_sample`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ name: "example", index, custom_task: null }),
    });
    expect(start.status).toBe(200);
    const sessionId = start.headers.get("session_id");
    expect(sessionId).toMatch(/^\d+$/);
    const opening = await jsonRecord(start);
    expect(Object.keys(opening).sort()).toEqual(["finish", "messages", "metric", "reward", "status", "tools"]);
    expect(opening).toMatchObject({ status: "running", finish: false, reward: 0 });
    expect(opening.messages).toEqual([
      { role: "system", content: expect.any(String) },
      { role: "user", content: expect.stringContaining("What is") },
    ]);
    const tools = opening.tools as Array<{
      type: string;
      function: { name: string; description: string; parameters: Record<string, unknown> };
    }>;
    expect(tools.map((t) => t.function.name)).toEqual(["add", "answer", "wait"]);
    for (const tool of tools) {
      expect(tool.type).toBe("function");
      expect(tool.function.description.length).toBeGreaterThan(0);
      expect(tool.function.parameters).toMatchObject({
        type: "object",
        properties: expect.any(Object),
        required: expect.any(Array),
      });
      expect(tool.function.parameters).not.toHaveProperty("$schema");
    }

    const [x, y, z] = exampleNumbers(index);
    // An assistant message as an OpenAI-compatible server returns it, extra fields included;
    // Go's controller canonicalizes the header to `Session_id`, so send that spelling once.
    const first = await fetch(`${api}/interact`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Session_id: String(sessionId) },
      body: JSON.stringify({
        messages: [
          {
            role: "assistant",
            content: "",
            refusal: null,
            tool_calls: [
              {
                id: "call_a1",
                type: "function",
                index: 0,
                function: { name: "add", arguments: JSON.stringify({ a: x, b: y }) },
              },
            ],
          },
        ],
      }),
    });
    expect(first.status).toBe(200);
    const turn = await jsonRecord(first);
    expect(Object.keys(turn).sort()).toEqual(["finish", "messages", "metrics", "reward", "status"]);
    expect(turn).toEqual({
      messages: [{ role: "tool", content: String(x + y), tool_call_id: "call_a1", name: "add" }],
      finish: false,
      reward: 0,
      status: "running",
      metrics: { turns: 1 },
    });

    const last = await postJson(
      `${api}/interact`,
      {
        messages: [
          {
            role: "assistant",
            content: null,
            tool_calls: [
              {
                id: "call_a2",
                type: "function",
                function: { name: "answer", arguments: JSON.stringify({ value: x + y + z }) },
              },
            ],
          },
        ],
      },
      { session_id: String(sessionId) },
    );
    expect(await jsonRecord(last)).toMatchObject({
      messages: [{ role: "tool", tool_call_id: "call_a2", content: "Correct." }],
      finish: true,
      reward: 1,
      status: "completed",
      metrics: { score: 1 },
    });

    // The trainer cancels every session it leaves, even finished ones: always 200.
    for (let i = 0; i < 2; i++) {
      const cancel = await fetch(`${api}/cancel`, { method: "POST", headers: { session_id: String(sessionId) } });
      expect(cancel.status).toBe(200);
    }
    // AgentBench v0.2 clients send the id in the body instead.
    const bodyCancel = await postJson(`${api}/cancel`, { session_id: Number(sessionId) });
    expect(bodyCancel.status).toBe(200);
  });

  it("serves the listing endpoints in the AgentBench shapes", async () => {
    const indices = (await (await fetch(`${api}/get_indices?name=example`)).json()) as number[];
    expect(indices.length).toBe(1100);
    expect(indices.slice(0, 3)).toEqual([0, 1, 2]);
    const workers = await jsonRecord(await fetch(`${api}/list_workers`));
    expect(workers.example).toMatchObject({
      workers: { "0": { id: 0, address: stack.workers[0]?.address, capacity: 4, status: "ALIVE" } },
    });
    expect(await (await fetch(`${api}/get_tasks`)).json()).toEqual(["example"]);
    const start = await postJson(`${api}/start_sample`, { name: "example", index: 5 });
    const id = String(start.headers.get("session_id"));
    const sessions = await jsonRecord(await fetch(`${api}/list_sessions`));
    expect(sessions[id]).toMatchObject({ name: "example", index: 5, worker_id: 0 });
    const all = await postJson(`${api}/cancel_all`, {});
    expect(all.status).toBe(200);
    expect(await jsonRecord(await fetch(`${api}/list_sessions`))).toEqual({});
    expect(stack.workers[0]?.sessionCount).toBe(0);
  });

  it("accepts a worker heartbeat exactly as AgentBench's Python task worker sends it", async () => {
    const beat = await postJson(`${api}/receive_heartbeat`, {
      name: "example",
      address: stack.workers[0]?.address,
      concurrency: 4,
      indices: Array.from({ length: 1100 }, (_, i) => i),
    });
    expect(beat.status).toBe(200);
    const bad = await postJson(`${api}/receive_heartbeat`, {
      name: "example",
      address: "not a url",
      concurrency: 0,
      indices: [],
    });
    expect(bad.status).toBe(400);
    const paths = ((await bad.json()) as { issues: Array<{ path: string }> }).issues.map((i) => i.path).sort();
    expect(paths).toEqual(["address", "concurrency"]);
  });
});
