import { describe, expect, it } from "vitest";
import {
  ControllerClient,
  EnvBadRequestError,
  EnvCapacityError,
  EnvProtocolError,
  EnvSessionLostError,
  EnvTaskNotServedError,
  EnvUnavailableError,
  isAgentOutcome,
} from "../../shared/env/client.ts";
import { freePort } from "../../shared/net.ts";
import { call, waitFor } from "./helpers.ts";

/** Unit tests of the retry policy with a scripted fetch (the integration suites use real servers). */
function scripted(answers: Array<() => Response | Promise<Response>>) {
  const calls: string[] = [];
  const fake = async (input: string | URL | Request) => {
    calls.push(String(input).replace(/^.*\/api\//, ""));
    const next = answers.shift();
    if (!next) throw new Error("no scripted answer left");
    return next();
  };
  return { calls, fetch: fake as typeof fetch };
}

const started = () =>
  new Response(
    JSON.stringify({
      messages: [{ role: "user", content: "hi" }],
      tools: [],
      status: "running",
      finish: false,
      reward: 0,
    }),
    {
      status: 200,
      headers: { session_id: "17" },
    },
  );
const status =
  (code: number, error = "boom", extra: Record<string, unknown> = {}) =>
  () =>
    new Response(JSON.stringify({ error, ...extra }), { status: code });
const turn = () =>
  new Response(JSON.stringify({ messages: [], finish: false, reward: 0, status: "running", metrics: {} }), {
    status: 200,
  });

describe("ControllerClient", () => {
  it("retries start_sample on 5xx with backoff and returns the header session id", async () => {
    const fake = scripted([status(503), status(500), started]);
    const client = new ControllerClient({ baseUrl: "http://controller:5020", backoffMs: 1, fetch: fake.fetch });
    const sample = await client.startSample("db", 3);
    expect(sample).toMatchObject({ sessionId: 17, status: "running", metrics: {} });
    expect(fake.calls).toEqual(["start_sample", "start_sample", "start_sample"]);
  });

  it("never retries a 4xx and marks it not retryable", async () => {
    const fake = scripted([status(400, "invalid start_sample body: index: expected number")]);
    const client = new ControllerClient({ baseUrl: "http://controller:5020/api/", backoffMs: 1, fetch: fake.fetch });
    const error = await client.startSample("db", 3).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EnvBadRequestError);
    expect(error).toMatchObject({ retryable: false, status: 400 });
    expect((error as Error).message).toMatch(/index: expected number/);
    expect(fake.calls).toEqual(["start_sample"]);
  });

  it("waits for a task whose workers have not registered yet, as for a full worker", async () => {
    const fake = scripted([status(404, 'name: no worker has registered task "db" (registered: os)')]);
    const client = new ControllerClient({ baseUrl: "http://controller:5020", backoffMs: 1, fetch: fake.fetch });
    const error = await client.startSample("db", 3).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EnvTaskNotServedError);
    expect(error).toBeInstanceOf(EnvCapacityError);
    expect(error).toMatchObject({ retryable: true, status: 404 });
  });

  it("maps 406 to a retryable capacity error and 502 to a lost session", async () => {
    const fake = scripted([
      status(406, "no worker has a free slot"),
      status(502, "worker is dead", { reason: "worker_lost" }),
    ]);
    const client = new ControllerClient({ baseUrl: "http://controller:5020", backoffMs: 1, fetch: fake.fetch });
    await expect(client.startSample("db", 3)).rejects.toBeInstanceOf(EnvCapacityError);
    const lost = await client.interact(5, call("x", {})).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(EnvSessionLostError);
    expect(lost).toMatchObject({ retryable: true, status: 502 });
    expect((lost as Error).message).toMatch(/worker_lost/);
    expect(fake.calls).toEqual(["start_sample", "interact"]);
  });

  it("retries interact only when the turn provably was not applied (503), not on 500", async () => {
    const fake = scripted([status(503), turn, status(500), () => new Response("{}")]);
    const client = new ControllerClient({ baseUrl: "http://controller:5020", backoffMs: 1, fetch: fake.fetch });
    await expect(client.interact(5, call("x", {}))).resolves.toMatchObject({ status: "running" });
    await expect(client.interact(5, call("x", {}))).rejects.toBeInstanceOf(EnvUnavailableError);
    // After the failed turn the client cancels the session it gives up on.
    await waitFor(() => fake.calls.length >= 4, 5_000, "the cancel after the failed turn");
    expect(fake.calls).toEqual(["interact", "interact", "interact", "cancel"]);
  });

  it("times out a hanging request and rejects answers that break the protocol", async () => {
    const hanging: typeof fetch = (_input, init) =>
      new Promise((_resolve, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason)));
    const slow = new ControllerClient({
      baseUrl: "http://controller:5020",
      requestTimeoutMs: 50,
      maxRetries: 0,
      fetch: hanging,
    });
    const error = await slow.startSample("db", 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EnvUnavailableError);
    expect((error as Error).message).toMatch(/timed out/);

    const noHeader = scripted([
      () => new Response(JSON.stringify({ messages: [], tools: [], status: "running", finish: false, reward: 0 })),
    ]);
    const client = new ControllerClient({ baseUrl: "http://controller:5020", fetch: noHeader.fetch });
    await expect(client.startSample("db", 1)).rejects.toBeInstanceOf(EnvProtocolError);
  });

  it("gives up on an unreachable controller after its retries with an infrastructure error", async () => {
    const port = await freePort();
    const client = new ControllerClient({ baseUrl: `http://127.0.0.1:${port}`, backoffMs: 1, maxRetries: 2 });
    const error = await client.startSample("db", 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(EnvUnavailableError);
    expect(error).toMatchObject({ retryable: true });
    expect((error as Error).message).toMatch(/ECONNREFUSED/);
  });

  it("tells agent outcomes (scored) from environment-side endings (retried)", () => {
    expect(isAgentOutcome("completed")).toBe(true);
    expect(isAgentOutcome("agent invalid action")).toBe(true);
    expect(isAgentOutcome("task limit reached")).toBe(true);
    expect(isAgentOutcome("task error")).toBe(false);
    expect(isAgentOutcome("cancelled")).toBe(false);
    expect(isAgentOutcome("running")).toBe(false);
  });
});
