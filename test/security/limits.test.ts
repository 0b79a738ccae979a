import { request } from "node:http";
import { connect } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { startController } from "../../functions/controller/controller.ts";
import { ChatCodec } from "../../shared/chat/index.ts";
import { LimitsConfig } from "../../shared/config/limits.ts";
import { createApp, listen, type RunningServer } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { createPolicyServer, type PolicyServer } from "../../trainer-image/policy-server/app.ts";
import { ScriptedPolicy } from "../policy-server/scripted.ts";

const cleanup: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const close of cleanup.splice(0).reverse()) await close();
});

const log = createLogger({ role: "test" });

/** Streams a chunked body of 1 MiB pieces until an answer comes (or 64 MiB went out). */
function streamUntilAnswered(url: string): Promise<{ status: number; sent: number }> {
  return new Promise((resolve, reject) => {
    let sent = 0;
    let answered = false;
    const chunk = Buffer.alloc(1024 * 1024, 120);
    const req = request(`${url}/api/receive_heartbeat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
    });
    req.on("response", (res) => {
      answered = true;
      res.resume();
      resolve({ status: res.statusCode ?? 0, sent });
      req.destroy();
    });
    req.on("error", (error) => {
      if (!answered) reject(error);
    });
    const pump = () => {
      while (!answered && sent < 64 * 1024 * 1024) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once("drain", pump);
      }
      if (!answered) req.end();
    };
    pump();
  });
}

describe("HTTP limits on every server", () => {
  it("answers 413 from Content-Length at once and stops a chunked body at the limit", async () => {
    const ctl = await startController({
      port: 0,
      httpLimits: { ...LimitsConfig.parse({}).http, bodyLimitBytes: 1024 * 1024 },
    });
    cleanup.push(() => ctl.close());
    const declared = await fetch(`${ctl.url}/api/receive_heartbeat`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "x".repeat(2 * 1024 * 1024),
    });
    expect(declared.status).toBe(413);
    expect(await declared.json()).toMatchObject({ error: expect.stringMatching(/limits\.http\.bodyLimitBytes/) });
    const streamed = await streamUntilAnswered(ctl.url);
    expect(streamed.status).toBe(413);
    expect(streamed.sent).toBeLessThan(64 * 1024 * 1024);
  });

  it("drops a client that sends its headers too slowly, and refuses connections past the cap", async () => {
    const app = createApp(log);
    app.get("/ok", (c) => c.text("ok"));
    const limits = { headersTimeoutMs: 300, requestTimeoutMs: 300, maxConnections: 2 };
    const server = await listen(app, 0, "127.0.0.1", limits);
    cleanup.push(() => server.close());
    const slow = connect(server.port, "127.0.0.1");
    slow.write("GET /ok HTTP/1.1\r\nHost: x\r\n");
    const closed = await new Promise<string>((resolve) => {
      let text = "";
      slow.on("data", (d) => {
        text += d.toString();
      });
      slow.on("close", () => resolve(text));
    });
    expect(closed).toMatch(/^HTTP\/1\.1 408/);
    const held = [connect(server.port, "127.0.0.1"), connect(server.port, "127.0.0.1")];
    await Promise.all(held.map((s) => new Promise((resolve) => s.once("connect", resolve))));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const refused = await fetch(`${server.url}/ok`).then(
      (r) => r.status,
      () => "refused",
    );
    expect(refused).toBe("refused");
    for (const s of held) s.destroy();
  });
});

describe("policy server limits", () => {
  const codec = ChatCodec.train([{ messages: [{ role: "user", content: "hi there" }], tools: [] }], 300);
  const filler = codec.encode("a")[0] as number;

  async function start(policyLimits: Partial<LimitsConfig["policy"]>, maxBatch = 1) {
    const policy = new ScriptedPolicy(0, [], { vocabSize: 300, contextLength: 128, fallback: filler });
    const limits = LimitsConfig.parse({ policy: policyLimits });
    const server: PolicyServer = createPolicyServer({ policy, codec, log, maxBatch, limits });
    const http: RunningServer = await listen(server.app);
    cleanup.push(async () => {
      await http.close();
      await server.close();
    });
    return { policy, server, url: http.url };
  }

  const post = (url: string, body: Record<string, unknown>) =>
    fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: [{ role: "user", content: "hi" }], ...body }),
    });

  it("refuses a prompt that cannot fit before rendering and tokenizing it", async () => {
    const { url } = await start({});
    const render = vi.spyOn(codec, "promptTokens");
    const response = await post(url, { messages: [{ role: "user", content: "word ".repeat(400_000) }] });
    expect(response.status).toBe(400);
    expect(JSON.stringify(await response.json())).toMatch(
      /messages.*at least \d+ tokens but the context window is 128/,
    );
    expect(render).not.toHaveBeenCalled();
    render.mockRestore();
  });

  it("answers 429 with Retry-After past the queued-sequence cap", async () => {
    const { url } = await start({ maxQueuedSequences: 1 });
    const response = await post(url, { n: 2, max_tokens: 4 });
    expect(response.status).toBe(429);
    expect(Number(response.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect(JSON.stringify(await response.json())).toMatch(/limits\.policy\.maxQueuedSequences/);
    expect((await post(url, { n: 1, max_tokens: 4 })).status).toBe(200);
  });

  it("answers 504 when a request runs past its deadline, and serves the next one", async () => {
    const { policy, url } = await start({ requestDeadlineSeconds: 0.1 });
    const slowStep = () => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20);
    await post(url, { max_tokens: 1 }); // creates the decoder
    if (!policy.decoder) throw new Error("no decoder");
    policy.decoder.afterStep = slowStep;
    const response = await post(url, { max_tokens: 60 });
    expect(response.status).toBe(504);
    expect(JSON.stringify(await response.json())).toMatch(/requestDeadlineSeconds/);
    policy.decoder.afterStep = undefined;
    expect((await post(url, { max_tokens: 2 })).status).toBe(200);
  });
});
