import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import { DEFAULT_HTTP_LIMITS } from "../../shared/http.ts";
import { call, errorBody, postJson, waitFor } from "./helpers.ts";

/**
 * The controller's calls to env workers, against a hand-written worker whose every byte, socket
 * and header the test controls: replies passed through untouched, pooled keep-alive connections,
 * the secret on every call, and the limits on what a worker may answer.
 */

const ENV_SECRET = "env-secret-0123456789abcdef";
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

interface FakeWorker {
  readonly address: string;
  /** TCP connections the controller opened to this worker. */
  readonly connections: () => number;
  /** Every request: path and authorization header. */
  readonly requests: Array<{ path: string; authorization: string | undefined }>;
}

type Handler = (path: string, body: Record<string, unknown>, res: ServerResponse, req: IncomingMessage) => void;

/** A worker that answers get_sessions and cancel itself and everything else with `handler`. */
async function fakeWorker(handler: Handler): Promise<FakeWorker> {
  const sockets = new Set<Socket>();
  let connections = 0;
  const requests: FakeWorker["requests"] = [];
  const server = createServer((req, res) => {
    let text = "";
    req.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    req.on("end", () => {
      const path = (req.url ?? "").replace(/^\/api\//, "");
      requests.push({ path, authorization: req.headers.authorization });
      if (path === "get_sessions") return void res.writeHead(200).end("{}");
      if (path === "cancel") return void res.writeHead(200).end('{"cancelled":true}');
      handler(path, text ? (JSON.parse(text) as Record<string, unknown>) : {}, res, req);
    });
  });
  server.on("connection", (socket: Socket) => {
    connections += 1;
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  );
  return {
    address: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api`,
    connections: () => connections,
    requests,
  };
}

async function controllerWith(worker: FakeWorker, options: Parameters<typeof startController>[0] = {}) {
  const ctl: RunningController = await startController({ port: 0, envSecret: ENV_SECRET, ...options });
  cleanups.push(() => ctl.close());
  const beat = await postJson(
    `${ctl.url}/api/receive_heartbeat`,
    { name: "fake", address: worker.address, concurrency: 8, indices: [0, 1, 2] },
    { authorization: `Bearer ${ENV_SECRET}` },
  );
  expect(beat.status).toBe(200);
  // The first reconciliation (get_sessions) runs in the background; let it land first.
  await waitFor(() => worker.requests.some((r) => r.path === "get_sessions"), 5_000, "first reconciliation");
  return ctl;
}

const opening = (extra = "") =>
  `{ "status" : "running", "finish":false, "reward":0, "messages":[], "tools":[], "metric":{}${extra} }`;

async function start(ctl: RunningController): Promise<Response> {
  return postJson(`${ctl.url}/api/start_sample`, { name: "fake", index: 1 });
}

async function interact(ctl: RunningController, sessionId: string | null): Promise<Response> {
  return postJson(
    `${ctl.url}/api/interact`,
    { messages: [call("add", { a: 1, b: 2 })] },
    { session_id: String(sessionId) },
  );
}

describe("controller to worker calls", () => {
  it("passes the worker's answers through byte for byte, reading only finish and status", async () => {
    // Spacing and a field the protocol does not know: a re-serialized answer would lose both.
    const turn =
      '{"messages":[{"role":"tool","tool_call_id":"call_1","content":"3"}],  "finish":false,"reward":0,"status":"running","metrics":{},"x_worker_note":"kept"}';
    const worker = await fakeWorker((path, _body, res) => {
      res
        .writeHead(200, { "content-type": "application/json" })
        .end(path === "start_sample" ? opening(', "x": 1') : turn);
    });
    const ctl = await controllerWith(worker);
    const started = await start(ctl);
    expect(started.status).toBe(200);
    expect(await started.text()).toBe(opening(', "x": 1'));
    const sessionId = started.headers.get("session_id");
    const answered = await interact(ctl, sessionId);
    expect(answered.status).toBe(200);
    expect(answered.headers.get("content-type")).toBe("application/json");
    expect(await answered.text()).toBe(turn);
    // Still running, so still pinned.
    expect(Object.keys(ctl.controller.listSessions())).toEqual([sessionId]);
  });

  it("ends the session when the passed-through answer finishes it", async () => {
    const worker = await fakeWorker((path, _body, res) => {
      res
        .writeHead(200)
        .end(path === "start_sample" ? opening() : '{"messages":[],"finish":true,"reward":1,"status":"completed"}');
    });
    const ctl = await controllerWith(worker);
    const sessionId = (await start(ctl)).headers.get("session_id");
    expect((await interact(ctl, sessionId)).status).toBe(200);
    expect(ctl.controller.listSessions()).toEqual({});
    expect((await interact(ctl, sessionId)).status).toBe(404);
  });

  it("answers 502 worker_error when a worker's answer has no valid status or finish, and cancels the session there", async () => {
    const worker = await fakeWorker((path, _body, res) => {
      res.writeHead(200).end(path === "start_sample" ? opening() : '{"messages":[],"finish":"no","status":"won"}');
    });
    const ctl = await controllerWith(worker);
    const sessionId = (await start(ctl)).headers.get("session_id");
    const answered = await interact(ctl, sessionId);
    expect(answered.status).toBe(502);
    const body = await errorBody(answered);
    expect(body).toMatchObject({ reason: "worker_error", status: "task error", finish: true });
    expect(body.error).toMatch(/finish/);
    expect(ctl.controller.listSessions()).toEqual({});
    await waitFor(() => worker.requests.some((r) => r.path === "cancel"), 5_000, "cancel sent to the worker");
  });

  it("answers 502 for a start_sample answer that is not JSON, and keeps no session", async () => {
    const worker = await fakeWorker((_path, _body, res) => void res.writeHead(200).end("<html>"));
    const ctl = await controllerWith(worker);
    const started = await start(ctl);
    expect(started.status).toBe(502);
    expect((await errorBody(started)).error).toMatch(/invalid body: not valid JSON/);
    expect(ctl.controller.listSessions()).toEqual({});
  });

  it("reads no worker reply past the body limit: the turn ends as worker_error", async () => {
    const limit = 4096;
    const worker = await fakeWorker((path, _body, res) => {
      if (path === "start_sample") return void res.writeHead(200).end(opening());
      // Chunked, so that only counting the bytes (not Content-Length) can stop it.
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"messages":[{"role":"tool","tool_call_id":"c","content":"');
      for (let i = 0; i < 8; i++) res.write("x".repeat(1024));
      res.end('"}],"finish":false,"reward":0,"status":"running"}');
    });
    const ctl = await controllerWith(worker, { httpLimits: { ...DEFAULT_HTTP_LIMITS, bodyLimitBytes: limit } });
    const sessionId = (await start(ctl)).headers.get("session_id");
    const answered = await interact(ctl, sessionId);
    expect(answered.status).toBe(502);
    const body = await errorBody(answered);
    expect(body).toMatchObject({ reason: "worker_error" });
    expect(body.error).toMatch(/over 4096 bytes/);
  });

  it("reuses pooled keep-alive connections and sends the secret on every call", async () => {
    const worker = await fakeWorker((path, _body, res) => {
      res
        .writeHead(200)
        .end(path === "start_sample" ? opening() : '{"messages":[],"finish":false,"reward":0,"status":"running"}');
    });
    const ctl = await controllerWith(worker);
    const sessionId = (await start(ctl)).headers.get("session_id");
    expect((await interact(ctl, sessionId)).status).toBe(200);
    // The background reconciliation may have needed a second connection; after that, none.
    const before = worker.connections();
    expect(before).toBeLessThanOrEqual(2);
    for (let i = 0; i < 20; i++) expect((await interact(ctl, sessionId)).status).toBe(200);
    expect(worker.connections()).toBe(before);
    expect(worker.requests.length).toBeGreaterThanOrEqual(22);
    expect(new Set(worker.requests.map((r) => r.authorization))).toEqual(new Set([`Bearer ${ENV_SECRET}`]));
  });

  it("retries once on a fresh connection when a pooled one was closed under it; a reset on a fresh one is a dead worker", async () => {
    let resetNext = 0;
    const worker = await fakeWorker((path, _body, res, req) => {
      if (path === "start_sample") return void res.writeHead(200).end(opening());
      if (resetNext > 0) {
        resetNext -= 1;
        // The worker closed the idle connection just as the controller reused it.
        return void req.socket.destroy();
      }
      res.writeHead(200).end('{"messages":[],"finish":false,"reward":0,"status":"running"}');
    });
    const ctl = await controllerWith(worker);
    const sessionId = (await start(ctl)).headers.get("session_id");
    expect((await interact(ctl, sessionId)).status).toBe(200);
    const before = worker.connections();
    resetNext = 1;
    expect((await interact(ctl, sessionId)).status).toBe(200);
    expect(worker.connections()).toBe(before + 1);
    // Pooled again, then reset on the pooled socket and on the fresh one: the worker is gone.
    expect((await interact(ctl, sessionId)).status).toBe(200);
    resetNext = 2;
    const lost = await interact(ctl, sessionId);
    expect(lost.status).toBe(502);
    expect(await errorBody(lost)).toMatchObject({ reason: "worker_lost" });
    expect(Object.values(ctl.controller.listWorkers().fake?.workers ?? {})[0]?.status).toBe("DEAD");
  });

  it("times out a worker that never answers: the turn ends as worker_timeout", async () => {
    const worker = await fakeWorker((path, _body, res) => {
      if (path === "start_sample") return void res.writeHead(200).end(opening());
      // Headers sent, body never finished: the deadline covers the whole reply.
      res.writeHead(200).write('{"messages":[');
    });
    const ctl = await controllerWith(worker, { workerTimeoutMs: 300 });
    const sessionId = (await start(ctl)).headers.get("session_id");
    const answered = await interact(ctl, sessionId);
    expect(answered.status).toBe(502);
    expect(await errorBody(answered)).toMatchObject({ reason: "worker_timeout" });
  });
});
