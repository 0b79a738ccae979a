import { Hono } from "hono";
import { describe, expect, it } from "vitest";
import { apiKeyOf } from "../../cli/commands/eval.ts";
import { ValidationError } from "../../shared/errors.ts";
import { listen } from "../../shared/http.ts";
import { PolicyClient, PolicyRequestError } from "../../shared/policy/client.ts";

describe("agentrl eval --policy URL with an API key", () => {
  it("takes the key from --api-key-env's variable, else OPENAI_API_KEY, and names a missing one", () => {
    expect(apiKeyOf(undefined, { OPENAI_API_KEY: "sk-default" })).toBe("sk-default");
    expect(apiKeyOf(undefined, {})).toBeUndefined();
    expect(apiKeyOf("HOSTED_KEY", { HOSTED_KEY: "sk-hosted", OPENAI_API_KEY: "sk-default" })).toBe("sk-hosted");
    expect(() => apiKeyOf("HOSTED_KEY", { OPENAI_API_KEY: "sk-default" })).toThrow(ValidationError);
    expect(() => apiKeyOf("HOSTED_KEY", {})).toThrow(/--api-key-env: environment variable HOSTED_KEY is not set/);
    expect(() => apiKeyOf("not a name", {})).toThrow(/--api-key-env: "not a name" is not an environment variable/);
  });

  it("sends the key as a bearer token; a hosted API refusing it is a non-retryable 401", async () => {
    const seen: Array<string | undefined> = [];
    const app = new Hono();
    app.post("/v1/chat/completions", (c) => {
      const auth = c.req.header("authorization");
      seen.push(auth);
      if (auth !== "Bearer sk-test") return c.json({ error: { message: "invalid api key" } }, 401);
      return c.json({
        id: "chatcmpl-1",
        object: "chat.completion",
        created: 1,
        model: "gpt-hosted",
        choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
      });
    });
    const http = await listen(app, 0, "127.0.0.1");
    try {
      const client = new PolicyClient(5_000);
      const endpoint = { pool: "eval", url: http.url, model: "gpt-hosted", requiresTrace: false };
      const request = {
        messages: [{ role: "user" as const, content: "hi" }],
        tools: [],
        temperature: 0,
        topP: 1,
        maxTokens: 4,
      };
      const answer = await client.generate({ ...endpoint, apiKey: "sk-test" }, request);
      expect(answer.message.content).toBe("hi");
      const refused = client.generate(endpoint, request);
      await expect(refused).rejects.toBeInstanceOf(PolicyRequestError);
      await expect(refused).rejects.toThrow(/HTTP 401/);
      expect(seen).toEqual(["Bearer sk-test", undefined]);
    } finally {
      await http.close();
    }
  });
});
