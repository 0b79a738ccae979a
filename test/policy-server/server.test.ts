import OpenAI from "openai";
import type { ChatCompletion } from "openai/resources/chat/completions";
import { afterEach, describe, expect, it } from "vitest";
import { ChatCodec } from "../../shared/chat/index.ts";
import { listen, type RunningServer } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import type { ChatMessage, GenerationTrace, ToolSpec } from "../../shared/protocol/openai.ts";
import { createPolicyServer, type PolicyServer } from "../../trainer-image/policy-server/app.ts";
import type { SchedulerStats } from "../../trainer-image/policy-server/scheduler.ts";
import { ScriptedPolicy } from "./scripted.ts";

const tools: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "bash_action",
      description: "Run a bash script",
      parameters: { type: "object", properties: { script: { type: "string" } }, required: ["script"] },
    },
  },
];
const messages: ChatMessage[] = [
  { role: "system", content: "You are an agent." },
  { role: "user", content: "List the files." },
];
const CALL = '<tool_call>{"name": "bash_action", "arguments": {"script": "ls"}}</tool_call>';
const codec = ChatCodec.train([{ messages: [...messages, { role: "assistant", content: CALL }], tools }], 400);
const script = [...codec.encode(CALL), codec.endOfTurnId];
const filler = codec.encode("a")[0] as number;
const CONTEXT = 512;
const VOCAB = 400;
const MARGIN = 30;
/** log_softmax at the favoured token: margin - log(e^margin + (V - 1)), temperature 1. */
const favouredLogprob = MARGIN - Math.log(Math.exp(MARGIN) + (VOCAB - 1));

type ChoiceWithTrace = ChatCompletion.Choice & { agentrl: GenerationTrace };

const open: Array<{ server: PolicyServer; http: RunningServer }> = [];
afterEach(async () => {
  for (const { server, http } of open.splice(0)) {
    await http.close();
    await server.close();
  }
});

async function start(policyScript: readonly number[] = script, maxBatch = 16) {
  const policy = new ScriptedPolicy(0, policyScript, {
    vocabSize: VOCAB,
    contextLength: CONTEXT,
    margin: MARGIN,
    fallback: filler,
  });
  const server = createPolicyServer({ policy, codec, log: createLogger({ role: "test" }), maxBatch });
  const http = await listen(server.app);
  open.push({ server, http });
  return { policy, server, url: http.url };
}

async function post(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: response.status, json: (await response.json()) as Record<string, unknown> };
}

describe("policy server", () => {
  it("works with the official openai client: tool_calls plus the agentrl trace", async () => {
    const { url } = await start();
    const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
    const completion = await client.chat.completions.create({
      model: "agentrl",
      messages: [...messages],
      tools: tools.map((t) => ({ type: "function" as const, function: t.function })),
      temperature: 1,
      seed: 7,
      logprobs: true,
    });
    const choice = completion.choices[0] as ChoiceWithTrace;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.tool_calls?.[0]).toMatchObject({
      type: "function",
      function: { name: "bash_action", arguments: '{"script":"ls"}' },
    });
    expect(choice.agentrl.token_ids).toEqual(script);
    expect(choice.agentrl.prompt_token_ids).toEqual(codec.promptTokens(messages, tools));
    expect(choice.agentrl.policy_versions).toEqual(script.map(() => 0));
    for (const lp of choice.agentrl.logprobs) expect(lp).toBeCloseTo(favouredLogprob, 5);
    expect(choice.logprobs?.content?.map((t) => t.logprob)).toEqual(choice.agentrl.logprobs);
    expect(completion.usage).toMatchObject({ prompt_tokens: choice.agentrl.prompt_token_ids?.length });

    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["agentrl-current"]);
  });

  it("uses agentrl.prompt_token_ids instead of rendering, and honours n, seed and max_tokens", async () => {
    const { url } = await start([]); // never stops: every token is the filler
    const prompt = [...codec.promptTokens(messages, tools), filler];
    const { status, json } = await post(url, {
      messages,
      n: 3,
      max_tokens: 5,
      seed: 1,
      agentrl: { prompt_token_ids: prompt },
    });
    expect(status).toBe(200);
    const choices = json.choices as ChoiceWithTrace[];
    expect(choices).toHaveLength(3);
    for (const choice of choices) {
      expect(choice.finish_reason).toBe("length");
      expect(choice.agentrl.prompt_token_ids).toEqual(prompt);
      expect(choice.agentrl.token_ids).toEqual([filler, filler, filler, filler, filler]);
      expect(choice.message.content).toBe("aaaaa");
    }
  });

  it.each([
    ["missing messages", {}, "messages"],
    ["bad role", { messages: [{ role: "robot", content: "x" }] }, "messages[0].role"],
    ["temperature out of range", { messages, temperature: 3 }, "temperature"],
    ["n zero", { messages, n: 0 }, "n"],
    ["max_tokens not an integer", { messages, max_tokens: 1.5 }, "max_tokens"],
    [
      "tool without parameters",
      { messages, tools: [{ type: "function", function: { name: "x" } }] },
      "tools[0].function.parameters",
    ],
    [
      "tool call arguments not text",
      {
        messages: [
          { role: "assistant", tool_calls: [{ id: "1", type: "function", function: { name: "x", arguments: {} } }] },
        ],
      },
      "messages[0].tool_calls[0].function.arguments",
    ],
    [
      "token id past the vocabulary",
      { messages, agentrl: { prompt_token_ids: [1, VOCAB + 5] } },
      "agentrl.prompt_token_ids[1]",
    ],
  ])("answers 400 naming the field: %s", async (_name, body, path) => {
    const { url } = await start();
    const { status, json } = await post(url, body);
    expect(status).toBe(400);
    expect((json.issues as Array<{ path: string }>).map((i) => i.path)).toContain(path);
  });

  it("answers 400 for malformed JSON and keeps serving", async () => {
    const { url } = await start();
    const bad = await post(url, "{not json");
    expect(bad.status).toBe(400);
    expect(String(bad.json.error)).toMatch(/not valid JSON/);
    expect((await post(url, { messages })).status).toBe(200);
  });

  it("rejects a prompt past the context window with a clear error, and keeps serving", async () => {
    const { url, server } = await start();
    const long: ChatMessage[] = [{ role: "user", content: "many words ".repeat(CONTEXT) }];
    const { status, json } = await post(url, { messages: long, tools });
    expect(status).toBe(400);
    const issue = (json.issues as Array<{ path: string; message: string }>)[0];
    expect(issue?.path).toBe("messages");
    expect(issue?.message).toMatch(/context window is 512 tokens/);
    // A prompt that just fits gets its max_tokens clamped to the room left.
    const prompt = Array.from({ length: CONTEXT - 3 }, () => filler);
    const fits = await post(url, { messages, max_tokens: 100, agentrl: { prompt_token_ids: prompt } });
    expect(fits.status).toBe(200);
    const choice = (fits.json.choices as ChoiceWithTrace[])[0];
    expect(choice?.agentrl.token_ids).toHaveLength(3);
    expect(choice?.finish_reason).toBe("length");
    expect(server.scheduler.stats().failed).toBe(0);
  });

  it("batches concurrent requests into shared decode steps", async () => {
    const { url, policy } = await start([], 16);
    const requests = 8;
    const maxTokens = 40;
    const responses = await Promise.all(
      Array.from({ length: requests }, (_, i) => post(url, { messages, max_tokens: maxTokens, seed: i })),
    );
    expect(responses.every((r) => r.status === 200)).toBe(true);
    const stats = (await (await fetch(`${url}/stats`)).json()) as SchedulerStats;
    // One-at-a-time decoding would need requests * (maxTokens - 1) steps with batch size 1.
    expect(stats.generatedTokens).toBe(requests * maxTokens);
    expect(stats.decodeSteps).toBeLessThan((requests * (maxTokens - 1)) / 2);
    expect(stats.maxBatch).toBeGreaterThanOrEqual(4);
    expect(Math.max(...(policy.decoder?.batchSizes ?? []))).toBe(stats.maxBatch);
  });

  it("switches weights between decode steps without dropping the request; per-token versions change", async () => {
    const { url, server, policy } = await start([]);
    const next = new ScriptedPolicy(1, [], { vocabSize: VOCAB, contextLength: CONTEXT, fallback: filler });
    let installed: Promise<void> | undefined;
    const decoder = policy.decoder;
    if (!decoder) throw new Error("server created no decoder");
    decoder.afterStep = (steps) => {
      if (steps === 10) installed = server.install(next);
    };
    const { status, json } = await post(url, { messages, max_tokens: 30 });
    expect(status).toBe(200);
    await installed;
    const trace = (json.choices as ChoiceWithTrace[])[0]?.agentrl;
    expect(trace?.token_ids).toHaveLength(30);
    // Token 0 comes from the prefill, tokens 1..10 from steps 1..10 (old weights), the rest from v1.
    expect(trace?.policy_versions).toEqual([...Array(11).fill(0), ...Array(19).fill(1)]);
    expect(policy.disposed).toBe(true);
    expect(server.version()).toBe(1);
    const health = (await (await fetch(`${url}/health`)).json()) as { policyVersion: number };
    expect(health.policyVersion).toBe(1);
  });

  it("answers a request pinned to a version only with that version: waits for it to load, refuses once past it", async () => {
    const { url, server } = await start([]);
    const pinned = (newest: number) => post(url, { messages, max_tokens: 3, agentrl: { newest_version: newest } });
    // Pinned to v1 while v0 is served: the answer waits for the install.
    const waiting = pinned(1);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await server.install(new ScriptedPolicy(1, [], { vocabSize: VOCAB, contextLength: CONTEXT, fallback: filler }));
    const answered = await waiting;
    expect(answered.status).toBe(200);
    expect((answered.json.choices as ChoiceWithTrace[])[0]?.agentrl.policy_versions).toEqual([1, 1, 1]);
    // Pinned to v0 while v1 is served: 409, saying which version it serves.
    const late = await pinned(0);
    expect(late.status).toBe(409);
    expect(JSON.stringify(late.json)).toMatch(/pinned to version 0 .*already serves 1/);
    // A malformed pin is refused with its path.
    const bad = await post(url, { messages, agentrl: { newest_version: -1 } });
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.json)).toContain("agentrl.newest_version");
  });

  it("maps the newest version to its pool's (a stale server pinned to newest 5 answers with v4)", async () => {
    const policy = new ScriptedPolicy(4, [], { vocabSize: VOCAB, contextLength: CONTEXT, fallback: filler });
    const server = createPolicyServer({
      policy,
      codec,
      log: createLogger({ role: "test" }),
      maxBatch: 4,
      pool: "stale",
      versionFor: (newest) => newest - (newest % 2),
      pinnedWaitSeconds: 1,
    });
    const http = await listen(server.app);
    open.push({ server, http });
    const ok = await post(http.url, { messages, max_tokens: 2, agentrl: { newest_version: 5 } });
    expect(ok.status).toBe(200);
    // newest 7 wants v6, which never loads here: 503 after the bounded wait, retryable.
    const missing = await post(http.url, { messages, max_tokens: 2, agentrl: { newest_version: 7 } });
    expect(missing.status).toBe(503);
    expect(JSON.stringify(missing.json)).toMatch(/pinned to version 6 .*still serving 4/);
  });

  it("frees the slot of a request whose client went away", async () => {
    const { url, server } = await start([]);
    const controller = new AbortController();
    const pending = fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages, max_tokens: 100_000 }),
      signal: controller.signal,
    }).catch((error: unknown) => error);
    while (server.scheduler.stats().active === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    controller.abort();
    expect(await pending).toBeInstanceOf(Error);
    const deadline = Date.now() + 5_000;
    while (server.scheduler.stats().active > 0 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(server.scheduler.stats()).toMatchObject({ active: 0, failed: 1 });
    expect(server.scheduler.stats().generatedTokens).toBeLessThan(CONTEXT);
  });

  it("refuses a version installed while or after it closes, and disposes it (a follower's poll cannot hang a close)", async () => {
    const { server } = await start();
    const during = new ScriptedPolicy(1, script, { vocabSize: VOCAB, contextLength: CONTEXT, fallback: filler });
    const after = new ScriptedPolicy(2, script, { vocabSize: VOCAB, contextLength: CONTEXT, fallback: filler });
    // Sent in the same tick as the close: the switch is still pending when the decode loop stops.
    const installing = server.install(during).catch((error: unknown) => error);
    await server.close();
    expect(((await installing) as Error).message).toMatch(/shutting down/);
    expect(during.disposed).toBe(true);
    await expect(server.install(after)).rejects.toThrow(/stopped/);
    expect(after.disposed).toBe(true);
    expect(server.version()).toBe(0);
  });

  it("fails requests cleanly when the server shuts down mid-generation", async () => {
    const { server, url, policy } = await start([]);
    // Close from inside decode step 5, so the request is surely mid-generation however fast it runs.
    let closing: Promise<void> | undefined;
    const decoder = policy.decoder;
    if (!decoder) throw new Error("the server did not create a decoder");
    decoder.afterStep = (steps) => {
      if (steps === 5) closing = server.close();
    };
    const pending = post(url, { messages, max_tokens: 400 }).catch((error: unknown) => error);
    const outcome = (await pending) as { status: number; json: { error: string } };
    expect(outcome.status).toBe(503);
    expect(outcome.json.error).toMatch(/shutting down/);
    await closing;
    expect(server.scheduler.stats().generatedTokens).toBeLessThan(400);
  });
});
