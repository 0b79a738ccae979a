import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { exampleTask } from "../../env-images/example/index.ts";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import { ChatCodec } from "../../shared/chat/index.ts";
import { ControllerClient, EnvBadRequestError } from "../../shared/env/client.ts";
import { type RunningWorker, serveTask } from "../../shared/env/worker.ts";
import { listen, type RunningServer } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { readSecrets } from "../../shared/security/secrets.ts";
import { createPolicyServer } from "../../trainer-image/policy-server/app.ts";
import { waitFor } from "../env/helpers.ts";
import { ScriptedPolicy } from "../policy-server/scripted.ts";

const ENV_SECRET = "env-secret-0123456789abcdef";
const CONTROLLER_SECRET = "controller-secret-0123456789";
const auth = (secret: string) => ({ authorization: `Bearer ${secret}` });

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of cleanup.splice(0).reverse()) await close();
});

async function controller(options: Parameters<typeof startController>[0] = {}): Promise<RunningController> {
  const running = await startController({
    port: 0,
    envSecret: ENV_SECRET,
    controllerSecret: CONTROLLER_SECRET,
    ...options,
  });
  cleanup.push(() => running.close());
  return running;
}

async function worker(controllerUrl: string, envSecret?: string): Promise<RunningWorker> {
  const running = await serveTask(exampleTask, {
    controllerUrl,
    heartbeatMs: 100,
    ...(envSecret ? { envSecret } : {}),
  });
  cleanup.push(() => running.close());
  return running;
}

function beat(overrides: Record<string, unknown> = {}) {
  return JSON.stringify({
    name: "example",
    address: "http://127.0.0.1:9/api",
    concurrency: 4,
    indices: [0, 1, 2],
    ...overrides,
  });
}

async function heartbeat(url: string, body: string, headers: Record<string, string> = auth(ENV_SECRET)) {
  return fetch(`${url}/api/receive_heartbeat`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
}

describe("controller-worker shared secret", () => {
  it("answers 401 to a heartbeat without (or with a wrong) secret and registers nothing", async () => {
    const ctl = await controller();
    for (const headers of [{}, auth("wrong-secret-0123456789"), { authorization: ENV_SECRET }]) {
      const response = await heartbeat(ctl.url, beat(), headers);
      expect(response.status).toBe(401);
      expect(await response.json()).toMatchObject({ error: expect.stringContaining("AGENTRL_ENV_SECRET") });
    }
    expect(ctl.controller.listWorkers()).toEqual({});
    // A worker without the secret never gets in either.
    await worker(ctl.url);
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(ctl.controller.listWorkers()).toEqual({});
  });

  it("serves sessions end to end when both sides hold the secret, and workers refuse callers without it", async () => {
    const ctl = await controller();
    const w = await worker(ctl.url, ENV_SECRET);
    await waitFor(() => Object.keys(ctl.controller.listWorkers()).length === 1, 5_000, "registration");
    const client = new ControllerClient({ baseUrl: ctl.url, token: CONTROLLER_SECRET, maxRetries: 0 });
    const sample = await client.startSample("example", 0);
    expect(sample.finish).toBe(false);
    // The worker's own endpoints: nothing without the secret, and a forged cancel changes nothing.
    const forged = await fetch(`${w.url}/api/cancel_all`, { method: "POST", body: "{}" });
    expect(forged.status).toBe(401);
    expect(w.sessionCount).toBe(1);
    const listed = await fetch(`${w.url}/api/get_sessions`, { headers: auth(ENV_SECRET) });
    expect(Object.keys((await listed.json()) as object)).toEqual([String(sample.sessionId)]);
    await client.cancel(sample.sessionId);
    await waitFor(() => w.sessionCount === 0, 5_000, "cancel reaches the worker");
  });

  it("requires AGENTRL_CONTROLLER_SECRET on the session API when set", async () => {
    const ctl = await controller();
    const response = await fetch(`${ctl.url}/api/start_sample`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "example", index: 0 }),
    });
    expect(response.status).toBe(401);
    expect((await fetch(`${ctl.url}/api/list_workers`)).status).toBe(401);
    const anonymous = new ControllerClient({ baseUrl: ctl.url, maxRetries: 0 });
    await expect(anonymous.listWorkers()).rejects.toBeInstanceOf(EnvBadRequestError);
    expect(await new ControllerClient({ baseUrl: ctl.url, token: CONTROLLER_SECRET }).listWorkers()).toEqual({});
  });

  it("never writes a secret into a log line (registration, rejected callers, sessions, lost workers)", async () => {
    const lines: string[] = [];
    const destination = { write: (line: string) => void lines.push(line) };
    const logged = (role: string) => createLogger({ role }, destination);
    process.env.AGENTRL_LOG_LEVEL = "debug";
    try {
      const ctl = await controller({ log: logged("controller") });
      const w = await serveTask(exampleTask, {
        controllerUrl: ctl.url,
        heartbeatMs: 100,
        envSecret: ENV_SECRET,
        log: logged("env-worker"),
      });
      cleanup.push(() => w.close());
      await serveTask(exampleTask, { controllerUrl: ctl.url, heartbeatMs: 100, log: logged("intruder") }).then(
        (intruder) => cleanup.push(() => intruder.close()),
      );
      await waitFor(() => Object.keys(ctl.controller.listWorkers()).length === 1, 5_000, "registration");
      const client = new ControllerClient({ baseUrl: ctl.url, token: CONTROLLER_SECRET, maxRetries: 0 });
      const sample = await client.startSample("example", 0);
      await w.close();
      await client.interact(sample.sessionId, { role: "assistant", content: "hi" }).catch(() => undefined);
    } finally {
      delete process.env.AGENTRL_LOG_LEVEL;
    }
    const text = lines.join("");
    expect(text).toMatch(/worker registered/);
    expect(text).toMatch(/heartbeat failed/);
    expect(text).not.toContain(ENV_SECRET);
    expect(text).not.toContain(CONTROLLER_SECRET);
  });

  it("reads secrets from the environment, rejects short ones without echoing them", () => {
    expect(readSecrets({ AGENTRL_ENV_SECRET: ENV_SECRET })).toEqual({ envSecret: ENV_SECRET });
    expect(() => readSecrets({ AGENTRL_POLICY_API_KEY: "short-key" })).toThrow(/AGENTRL_POLICY_API_KEY/);
    expect(() => readSecrets({ AGENTRL_POLICY_API_KEY: "short-key" })).not.toThrow(/short-key/);
  });
});

describe("registration caps", () => {
  it("answers 400 past the concurrency, indices, task and worker caps and keeps nothing", async () => {
    const ctl = await controller({ registrationLimits: { maxTasks: 1, maxWorkers: 2, maxIndices: 1000 } });
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ concurrency: 1_000_000 }, /concurrency: 1000000 exceeds the cap of 4096/],
      [{ indices: Array.from({ length: 1001 }, (_, i) => i) }, /indices: 1001 indices exceed the cap of 1000/],
      [{ address: "file:///etc/passwd" }, /address: must be an http\(s\) URL/],
      [{ address: "gopher://127.0.0.1:70/api" }, /address: must be an http\(s\) URL/],
    ];
    for (const [overrides, message] of cases) {
      const response = await heartbeat(ctl.url, beat(overrides));
      expect(response.status).toBe(400);
      expect(JSON.stringify(await response.json())).toMatch(message);
    }
    expect(ctl.controller.listWorkers()).toEqual({});
    expect((await heartbeat(ctl.url, beat({ address: "http://127.0.0.1:9/api" }))).status).toBe(200);
    expect((await heartbeat(ctl.url, beat({ address: "http://127.0.0.1:10/api" }))).status).toBe(200);
    const third = await heartbeat(ctl.url, beat({ address: "http://127.0.0.1:11/api" }));
    expect(third.status).toBe(400);
    expect(JSON.stringify(await third.json())).toMatch(/cap of 2 workers/);
    const otherTask = await heartbeat(ctl.url, beat({ name: "other", address: "http://127.0.0.1:12/api" }));
    expect(otherTask.status).toBe(400);
    expect(Object.keys(ctl.controller.listWorkers())).toEqual(["example"]);
  });

  it("forgets a task once its last worker is forgotten", async () => {
    const ctl = await controller({ heartbeatTimeoutMs: 50, forgetAfterMs: 150 });
    expect((await heartbeat(ctl.url, beat({ name: "ghost" }))).status).toBe(200);
    expect(Object.keys(ctl.controller.listWorkers())).toEqual(["ghost"]);
    await waitFor(() => Object.keys(ctl.controller.listWorkers()).length === 0, 5_000, "task forgotten");
    const tasks = await fetch(`${ctl.url}/api/get_tasks`, { headers: auth(CONTROLLER_SECRET) });
    expect(await tasks.json()).toEqual([]);
  });

  it("follows no redirect from a worker address (the secret never leaves for another host)", async () => {
    const hits: Array<{ url: string; authorization: string | undefined }> = [];
    const target = await httpServer((req, res) => {
      hits.push({ url: req.url ?? "", authorization: req.headers.authorization });
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
    const redirector = await httpServer((_req, res) => {
      res.writeHead(307, { location: `${target.url}/api/get_sessions` }).end();
    });
    const ctl = await controller();
    expect((await heartbeat(ctl.url, beat({ address: `${redirector.url}/api` }))).status).toBe(200);
    await waitFor(
      () => Object.values(ctl.controller.listWorkers().example?.workers ?? {})[0]?.status === "DEAD",
      5_000,
      "the redirecting worker is marked DEAD",
    );
    expect(hits).toEqual([]);
  });
});

describe("policy server API key", () => {
  it("answers 401 on /v1 and /stats without AGENTRL_POLICY_API_KEY, keeps /health open", async () => {
    const codec = ChatCodec.train([{ messages: [{ role: "user", content: "hi" }], tools: [] }], 300);
    const policy = new ScriptedPolicy(0, [codec.endOfTurnId], { vocabSize: 300, contextLength: 64, fallback: 0 });
    const key = "policy-key-0123456789abcdef";
    const server = createPolicyServer({ policy, codec, log: createLogger({ role: "test" }), maxBatch: 2, apiKey: key });
    const http: RunningServer = await listen(server.app);
    cleanup.push(async () => {
      await http.close();
      await server.close();
    });
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    const post = (headers: Record<string, string>) =>
      fetch(`${http.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body,
      });
    expect((await post({})).status).toBe(401);
    expect((await post(auth("not-the-key-0123456789"))).status).toBe(401);
    expect((await fetch(`${http.url}/v1/models`)).status).toBe(401);
    expect((await fetch(`${http.url}/stats`)).status).toBe(401);
    expect((await fetch(`${http.url}/health`)).status).toBe(200);
    expect((await post(auth(key))).status).toBe(200);
  });
});

async function httpServer(handler: Parameters<typeof createServer>[1]): Promise<{ url: string; server: Server }> {
  const server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}
