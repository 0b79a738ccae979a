import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { GatewayStartError, startGateway } from "../../functions/gateway/index.ts";
import type { ChatCodec } from "../../shared/chat/index.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { createLogger } from "../../shared/log.ts";
import { readSecrets } from "../../shared/security/secrets.ts";
import { MemoryObjectStore } from "../../shared/transport/memory.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { ADMIN_KEY, type Harness, post, startHarness } from "../gateway/harness.ts";
import { exampleCodec } from "../roles/rolloutHelpers.ts";

/** Strangers at the gateway: callers without a key, with the admin key where a session key belongs, with another session's key. */

let codec: ChatCodec;
beforeAll(async () => {
  codec = await exampleCodec();
});
const open: Harness[] = [];
afterEach(async () => {
  for (const h of open.splice(0)) await h.close();
});

const chat = { messages: [{ role: "user", content: "What is 1 + 2 + 3?" }] };

describe("gateway keys", () => {
  it("the admin key only opens sessions; a session key reaches only its own session; strangers get 401 and change nothing", async () => {
    const h = await startHarness(codec);
    open.push(h);
    const a = await h.createSession({ groupId: "ga", groupSize: 2 });
    const b = await h.createSession({ groupId: "ga", groupSize: 2 });
    const routes = (s: { sessionId: string; baseUrl: string }) => [
      { url: `${s.baseUrl}/chat/completions`, body: chat },
      { url: `${h.url}/v1/sessions/${s.sessionId}/reward`, body: { reward: 1 } },
      { url: `${h.url}/v1/sessions/${s.sessionId}/end`, body: {} },
    ];
    for (const key of [undefined, "", ADMIN_KEY, b.apiKey, `${a.apiKey}x`, a.apiKey.slice(0, -1)]) {
      for (const route of routes(a)) {
        const answer = await post(route.url, key, route.body);
        expect(answer.status, `${route.url} with ${key === ADMIN_KEY ? "the admin key" : "a wrong key"}`).toBe(401);
        expect(answer.headers.get("www-authenticate")).toMatch(/Bearer/);
      }
      const state = await fetch(`${h.url}/v1/sessions/${a.sessionId}`, {
        headers: key === undefined ? {} : { authorization: `Bearer ${key}` },
      });
      expect(state.status).toBe(401);
    }
    // a session key cannot open sessions
    expect((await post(`${h.url}/v1/sessions`, a.apiKey, {})).status).toBe(401);
    expect((await post(`${h.url}/v1/sessions`, undefined, {})).status).toBe(401);
    // an unknown or malformed session id answers exactly as a wrong key does: no oracle on ids
    const wrongKey = await post(`${h.url}/v1/sessions/${a.sessionId}/end`, b.apiKey, {});
    for (const id of ["gs-doesnotexist", "..%2F..%2Fetc", "a b", "x".repeat(300)]) {
      const answer = await post(`${h.url}/v1/sessions/${id}/end`, a.apiKey, {});
      expect(answer.status).toBe(401);
      expect(answer.json).toEqual(wrongKey.json);
    }
    // nothing reached the policy and no session changed
    expect(h.fake.requests).toHaveLength(0);
    const state = await fetch(`${h.url}/v1/sessions/${a.sessionId}`, {
      headers: { authorization: `Bearer ${a.apiKey}` },
    });
    expect(await state.json()).toMatchObject({ state: "open", calls: 0, reward: null });
    // the owner reaches it, and its state never shows a key
    expect(
      JSON.stringify(
        await (
          await fetch(`${h.url}/v1/sessions/${a.sessionId}`, { headers: { authorization: `Bearer ${a.apiKey}` } })
        ).json(),
      ),
    ).not.toContain(a.apiKey);
    expect((await post(`${a.baseUrl}/chat/completions`, a.apiKey, chat)).status).toBe(200);
  });

  it("never writes the admin key or a session key into a log line", async () => {
    const lines: string[] = [];
    process.env.AGENTRL_LOG_LEVEL = "debug";
    let h: Harness;
    try {
      h = await startHarness(
        codec,
        {},
        {},
        createLogger({ role: "gateway" }, { write: (line: string) => void lines.push(line) }),
      );
      open.push(h);
      const s = await h.createSession({ groupId: "g", groupSize: 1 });
      await post(`${s.baseUrl}/chat/completions`, s.apiKey, chat);
      await post(`${s.baseUrl}/chat/completions`, "wrong-key-but-long-enough", chat);
      await post(`${h.url}/v1/sessions/${s.sessionId}/reward`, s.apiKey, { reward: 1 });
      await post(`${h.url}/v1/sessions/${s.sessionId}/end`, s.apiKey, {});
      await post(`${h.url}/v1/sessions`, ADMIN_KEY, { groupId: "bad/id", groupSize: 1 });
      expect(lines.join("")).toMatch(/session opened/);
      expect(lines.join("")).toMatch(/group exported/);
      expect(lines.join("")).not.toContain(ADMIN_KEY);
      expect(lines.join("")).not.toContain(s.apiKey);
    } finally {
      delete process.env.AGENTRL_LOG_LEVEL;
    }
  });

  it("reads the admin key from the environment only, refuses a short one without echoing it, and does not start without one", async () => {
    expect(readSecrets({ AGENTRL_GATEWAY_ADMIN_KEY: ADMIN_KEY })).toEqual({ gatewayAdminKey: ADMIN_KEY });
    expect(() => readSecrets({ AGENTRL_GATEWAY_ADMIN_KEY: "short" })).toThrow(/AGENTRL_GATEWAY_ADMIN_KEY/);
    expect(() => readSecrets({ AGENTRL_GATEWAY_ADMIN_KEY: "short" })).not.toThrow(/short/);
    const store = new MemoryObjectStore();
    const transport = {
      store: () => store,
      queue: () => undefined,
      tidy: async () => {},
      close: async () => {},
    } as unknown as Transport;
    await expect(startGateway(parseConfig({}), transport, { current: "http://127.0.0.1:1/v1" }, {})).rejects.toThrow(
      GatewayStartError,
    );
    await expect(startGateway(parseConfig({}), transport, { current: "http://127.0.0.1:1/v1" }, {})).rejects.toThrow(
      /AGENTRL_GATEWAY_ADMIN_KEY is not set/,
    );
  });
});
