import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { exampleNumbers, exampleTask } from "../../env-images/example/index.ts";
import type { ChatCodec } from "../../shared/chat/index.ts";
import { toolSpecs } from "../../shared/env/session.ts";
import { exampleCodec } from "../roles/rolloutHelpers.ts";
import { ADMIN_KEY, type Harness, post, startHarness } from "./harness.ts";

let codec: ChatCodec;
beforeAll(async () => {
  codec = await exampleCodec();
});
const open: Harness[] = [];
afterEach(async () => {
  for (const h of open.splice(0)) await h.close();
});
async function harness(...args: Parameters<typeof startHarness> extends [unknown, ...infer R] ? R : never) {
  const h = await startHarness(codec, ...args);
  open.push(h);
  return h;
}

const tools: ChatCompletionTool[] = toolSpecs(exampleTask).map((t) => ({ type: "function", function: t.function }));
function firstMessages(index: number): ChatCompletionMessageParam[] {
  const [x, y, z] = exampleNumbers(index);
  return [
    { role: "system", content: "You solve arithmetic with the tools provided. Call exactly one tool per turn." },
    { role: "user", content: `What is ${x} + ${y} + ${z}? Use add, then submit with answer.` },
  ];
}

/** The agent's own tools: it adds locally and grades its own answer. */
function runTool(name: string, args: string, index: number): { output: string; reward?: number } {
  const parsed = JSON.parse(args) as { a?: number; b?: number; value?: number };
  if (name === "add") return { output: String((parsed.a ?? 0) + (parsed.b ?? 0)) };
  const [x, y, z] = exampleNumbers(index);
  return { output: "done", reward: parsed.value === x + y + z ? 1 : 0 };
}

/**
 * An unchanged agent of the common kind: keeps its own chat history (the SDK's message objects)
 * and re-sends all of it on every call. Returns the completions it got and the reward it gave.
 */
async function historyAgent(
  baseUrl: string,
  apiKey: string,
  index: number,
  options: { stream?: boolean; edit?: (message: ChatCompletionMessageParam) => ChatCompletionMessageParam } = {},
) {
  const client = new OpenAI({ baseURL: baseUrl, apiKey, maxRetries: 0 });
  const history = firstMessages(index);
  const completions: Array<{ id: string; promptIds: number[]; tokenIds: number[] }> = [];
  let reward = 0;
  for (let turn = 0; turn < 4; turn++) {
    let message: OpenAI.Chat.Completions.ChatCompletionMessage;
    if (options.stream) {
      const stream = await client.chat.completions.create({ model: "agentrl", messages: history, tools, stream: true });
      const chunks = [];
      for await (const chunk of stream) chunks.push(chunk);
      const calls = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
      message = {
        role: "assistant",
        content: chunks.map((c) => c.choices[0]?.delta.content ?? "").join("") || null,
        refusal: null,
        ...(calls.length > 0
          ? {
              tool_calls: calls.map((c) => ({
                id: c.id as string,
                type: "function" as const,
                function: { name: c.function?.name as string, arguments: c.function?.arguments as string },
              })),
            }
          : {}),
      };
      completions.push({ id: chunks[0]?.id as string, promptIds: [], tokenIds: [] });
    } else {
      const completion = await client.chat.completions.create({
        model: "agentrl",
        messages: history,
        tools,
        // @ts-expect-error vLLM's extension, passed through by the SDK
        return_token_ids: true,
      });
      const extra = completion as typeof completion & {
        prompt_token_ids: number[];
        choices: Array<{ token_ids: number[] }>;
      };
      completions.push({
        id: completion.id,
        promptIds: extra.prompt_token_ids,
        tokenIds: extra.choices[0]?.token_ids as number[],
      });
      message = completion.choices[0]?.message as OpenAI.Chat.Completions.ChatCompletionMessage;
    }
    history.push(options.edit ? options.edit(message) : message);
    const call = message.tool_calls?.[0];
    if (call?.type !== "function") break;
    const result = runTool(call.function.name, call.function.arguments, index);
    history.push({ role: "tool", tool_call_id: call.id, content: result.output });
    if (result.reward !== undefined) {
      reward = result.reward;
      break;
    }
  }
  return { completions, reward };
}

describe("gateway: an agent's calls become trajectories", () => {
  it("an agent that re-sends its own history gives one merged trajectory, token for token what the policy produced, zero drift", async () => {
    const h = await harness();
    const session = await h.createSession({ task: "example" });
    expect(session.baseUrl).toBe(`${h.url}/sessions/${session.sessionId}/v1`);
    const { completions, reward } = await historyAgent(session.baseUrl, session.apiKey, 3);
    expect(completions).toHaveLength(3);
    expect(reward).toBe(1);
    // the policy server was asked with the recorded tokens: each prompt extends the one before + its completion
    const sent = h.fake.requests.map((r) => r.agentrl?.prompt_token_ids ?? []);
    expect(sent).toEqual(completions.map((c) => c.promptIds));
    for (let i = 1; i < completions.length; i++) {
      const before = [...(completions[i - 1]?.promptIds ?? []), ...(completions[i - 1]?.tokenIds ?? [])];
      expect(completions[i]?.promptIds.slice(0, before.length)).toEqual(before);
    }
    expect((await post(`${h.url}/v1/sessions/${session.sessionId}/reward`, session.apiKey, { reward })).status).toBe(
      200,
    );
    const ended = await post(`${h.url}/v1/sessions/${session.sessionId}/end`, session.apiKey, {});
    expect(ended.json).toMatchObject({ state: "released", calls: 3, mergedCalls: 2, driftCalls: 0 });
    const { ready, dropped } = await h.drain();
    expect(dropped).toEqual([]);
    expect(ready).toHaveLength(1);
    expect(ready[0]).toMatchObject({ groupSize: 1, reward: 1, status: "completed", minVersion: 3, maxVersion: 3 });
    expect(ready[0]?.key).toBe(`trajectories/gw/${ready[0]?.groupId}/${session.sessionId}-seg0.json`);
    const trajectory = await h.stored(ready[0]!);
    const last = completions[2]!;
    expect(trajectory.tokenIds).toEqual([...last.promptIds, ...last.tokenIds]);
    // loss mask exactly on the three completions, with the fake server's log-probs and version
    const trained = trajectory.tokenIds.filter((_, i) => trajectory.lossMask[i] === 1);
    expect(trained).toEqual(completions.flatMap((c) => c.tokenIds));
    expect(trajectory.logprobs.filter((_, i) => trajectory.lossMask[i] === 1).every((l) => l === -0.25)).toBe(true);
    expect(new Set(trajectory.policyVersion.filter((_, i) => trajectory.lossMask[i] === 1))).toEqual(new Set([3]));
    expect(trajectory.metrics).toMatchObject({ gateway_calls: 3, gateway_merged_calls: 2, gateway_drift_calls: 0 });
    expect(trajectory.gatewayCalls?.map((c) => c.toolCalls)).toEqual([["add"], ["add"], ["answer"]]);
    expect(h.gateway.counters).toMatchObject({ sessions: 1, calls: 3, mergedCalls: 2, driftCalls: 0, segments: 1 });
  });

  it("streams with the SDK (stream: true) and still merges", async () => {
    const h = await harness();
    const session = await h.createSession();
    const { completions, reward } = await historyAgent(session.baseUrl, session.apiKey, 5, { stream: true });
    expect(completions).toHaveLength(3);
    expect(reward).toBe(1);
    await post(`${h.url}/v1/sessions/${session.sessionId}/reward`, session.apiKey, { reward });
    await post(`${h.url}/v1/sessions/${session.sessionId}/end`, session.apiKey, "");
    const { ready } = await h.drain();
    expect(ready).toHaveLength(1);
    expect((await h.stored(ready[0]!)).turns).toBe(3);
  });

  it("an agent that rewrites the model's answers drifts: counted, a new segment, the rewritten answer never trained", async () => {
    const h = await harness();
    const session = await h.createSession();
    const { completions } = await historyAgent(session.baseUrl, session.apiKey, 3, {
      // e.g. a framework that re-serializes the answer as text of its own
      edit: (m) => ({
        role: "assistant",
        content: `I will call ${(m as { tool_calls?: Array<{ function: { name: string } }> }).tool_calls?.[0]?.function.name}.`,
        tool_calls: (m as OpenAI.Chat.Completions.ChatCompletionMessage).tool_calls,
      }),
    });
    expect(completions).toHaveLength(3);
    await post(`${h.url}/v1/sessions/${session.sessionId}/reward`, session.apiKey, { reward: 0.5 });
    const ended = await post(`${h.url}/v1/sessions/${session.sessionId}/end`, session.apiKey, {});
    expect(ended.json).toMatchObject({ driftCalls: 2, mergedCalls: 0 });
    const { ready } = await h.drain();
    expect(ready).toHaveLength(3); // three segments, one per call, sharing the session's reward
    expect(ready.map((r) => r.reward)).toEqual([0.5, 0.5, 0.5]);
    expect(ready.every((r) => r.groupSize === 3)).toBe(true);
    for (const [i, r] of ready.entries()) {
      const t = await h.stored(r);
      // trained tokens are exactly that call's completion; the rewritten history is context
      expect(t.tokenIds.filter((_, k) => t.lossMask[k] === 1)).toEqual(completions[i]?.tokenIds);
      expect(t.tokenIds.slice(0, completions[i]?.promptIds.length)).toEqual(completions[i]?.promptIds);
    }
    expect(h.gateway.counters.driftCalls).toBe(2);
  });

  it("re-serialized tool-call arguments and new ids are the same answer: merged, not drift", async () => {
    const h = await harness();
    const session = await h.createSession();
    const { completions } = await historyAgent(session.baseUrl, session.apiKey, 4, {
      edit: (m) => {
        const message = m as OpenAI.Chat.Completions.ChatCompletionMessage;
        return {
          role: "assistant",
          content: "",
          tool_calls: (message.tool_calls ?? []).map((c, i) =>
            c.type === "function"
              ? {
                  id: `mine_${i}`,
                  type: "function",
                  function: {
                    name: c.function.name,
                    arguments: JSON.stringify(JSON.parse(c.function.arguments), null, 2),
                  },
                }
              : c,
          ),
        };
      },
    });
    expect(completions).toHaveLength(3);
    await post(`${h.url}/v1/sessions/${session.sessionId}/reward`, session.apiKey, { reward: 1 });
    const ended = await post(`${h.url}/v1/sessions/${session.sessionId}/end`, session.apiKey, {});
    expect(ended.json).toMatchObject({ driftCalls: 0, mergedCalls: 2 });
    expect((await h.drain()).ready).toHaveLength(1);
  });

  it("a call with a fresh prompt starts a segment of its own; a per-call reward overrides the session's for its segment", async () => {
    const h = await harness();
    const session = await h.createSession();
    const client = new OpenAI({ baseURL: session.baseUrl, apiKey: session.apiKey, maxRetries: 0 });
    const a = await client.chat.completions.create({ model: "m", messages: firstMessages(1), tools });
    const b = await client.chat.completions.create({ model: "m", messages: firstMessages(2), tools });
    expect(b.id).not.toBe(a.id);
    await post(`${h.url}/v1/sessions/${session.sessionId}/reward`, session.apiKey, { reward: 0.25 });
    await post(`${h.url}/v1/sessions/${session.sessionId}/reward`, session.apiKey, { completionId: b.id, reward: 1 });
    const unknown = await post(`${h.url}/v1/sessions/${session.sessionId}/reward`, session.apiKey, {
      completionId: "nope",
      reward: 1,
    });
    expect(unknown.status).toBe(404);
    await post(`${h.url}/v1/sessions/${session.sessionId}/end`, session.apiKey, {});
    const { ready } = await h.drain();
    expect(ready.map((r) => r.reward)).toEqual([0.25, 1]);
    expect(ready.map((r) => r.groupSize)).toEqual([2, 2]);
  });
});

describe("gateway: groups", () => {
  it("releases a group once all groupSize sessions ended; an unrewarded member is dropped, not trained", async () => {
    const h = await harness();
    const members = await Promise.all(
      [0, 1, 2].map(() => h.createSession({ task: "example", groupId: "g-7", groupSize: 3 })),
    );
    const full = await post(`${h.url}/v1/sessions`, ADMIN_KEY, { groupId: "g-7", groupSize: 3 });
    expect(full.status).toBe(409);
    const mismatched = await post(`${h.url}/v1/sessions`, ADMIN_KEY, { groupId: "g-7", groupSize: 4 });
    expect(mismatched.status).toBe(409);
    for (const [i, m] of members.entries()) {
      const { reward } = await historyAgent(m.baseUrl, m.apiKey, 10 + i);
      if (i < 2) await post(`${h.url}/v1/sessions/${m.sessionId}/reward`, m.apiKey, { reward: reward - i });
      await post(`${h.url}/v1/sessions/${m.sessionId}/end`, m.apiKey, {});
      if (i < 2) expect(await h.drain()).toEqual({ ready: [], dropped: [] });
    }
    const { ready, dropped } = await h.drain();
    expect(ready.map((r) => [r.groupId, r.groupSize, r.reward])).toEqual([
      ["g-7", 3, 1],
      ["g-7", 3, 0],
    ]);
    expect(dropped).toHaveLength(1);
    expect(dropped[0]).toMatchObject({ groupId: "g-7", groupSize: 3, reason: "ended without a reward" });
    expect(h.gateway.counters.unrewarded).toBe(1);
    expect((await post(`${h.url}/v1/sessions`, ADMIN_KEY, { groupId: "g-7", groupSize: 3 })).status).toBe(409);
  });

  it("ungrouped sessions of a task form baseline groups of gateway.baselineGroupSize", async () => {
    const h = await harness({ gateway: { baselineGroupSize: 2 } });
    const ids: string[] = [];
    for (const i of [0, 1, 2]) {
      const s = await h.createSession({ task: "example" });
      ids.push(s.sessionId);
      await historyAgent(s.baseUrl, s.apiKey, i);
      await post(`${h.url}/v1/sessions/${s.sessionId}/reward`, s.apiKey, { reward: i });
      await post(`${h.url}/v1/sessions/${s.sessionId}/end`, s.apiKey, {});
    }
    const { ready } = await h.drain();
    expect(ready).toHaveLength(2); // the third waits for a partner
    expect(ready[0]?.groupId).toBe(ready[1]?.groupId);
    expect(ready.map((r) => r.reward)).toEqual([0, 1]);
    // the group timeout releases the waiting one as it is
    h.clock.now += 901_000;
    await h.gateway.sweep();
    const late = await h.drain();
    expect(late.ready.map((r) => [r.reward, r.groupSize])).toEqual([[2, 1]]);
  });
});

describe("gateway: flow control and caps", () => {
  it("refuses a session with 429 + Retry-After when it would break the staleness bound", async () => {
    // bound: maxInFlightBatches 1 × batchSize 1 × groupSize 2 = 2 trajectories in flight
    const h = await harness({
      rollout: { maxInFlightBatches: 1, groupSize: 2 },
      trainer: { batchSize: 1, warmupFactor: 1 },
    });
    const a = await h.createSession();
    await h.createSession();
    const refused = await post(`${h.url}/v1/sessions`, ADMIN_KEY, {});
    expect(refused.status).toBe(429);
    expect(refused.headers.get("retry-after")).toBe("2");
    expect(String(refused.json.error)).toMatch(/staleness bound of 2/);
    // unconsumed trajectories count too: ending a session moves it to the queue, still in flight
    await historyAgent(a.baseUrl, a.apiKey, 0);
    await post(`${h.url}/v1/sessions/${a.sessionId}/reward`, a.apiKey, { reward: 1 });
    await post(`${h.url}/v1/sessions/${a.sessionId}/end`, a.apiKey, {});
    h.clock.now += 2_000; // past the depth cache
    expect((await post(`${h.url}/v1/sessions`, ADMIN_KEY, {})).status).toBe(429);
    await h.drain(); // the trainer consumed it
    h.clock.now += 2_000;
    expect((await post(`${h.url}/v1/sessions`, ADMIN_KEY, {})).status).toBe(201);
    expect(h.gateway.counters.refused).toBe(2);
  });

  it("abandons an idle session: counted, not trained, its group completes without it", async () => {
    const h = await harness({ gateway: { idleTimeoutSeconds: 60 } });
    const [a, b] = [
      await h.createSession({ groupId: "g1", groupSize: 2 }),
      await h.createSession({ groupId: "g1", groupSize: 2 }),
    ];
    await historyAgent(a!.baseUrl, a!.apiKey, 0);
    await post(`${h.url}/v1/sessions/${a!.sessionId}/reward`, a!.apiKey, { reward: 1 });
    await post(`${h.url}/v1/sessions/${a!.sessionId}/end`, a!.apiKey, {});
    await historyAgent(b!.baseUrl, b!.apiKey, 1); // b never ends
    h.clock.now += 61_000;
    await h.gateway.sweep();
    expect(h.gateway.counters.abandoned).toBe(1);
    const { ready, dropped } = await h.drain();
    expect(ready.map((r) => r.trajectoryId)).toEqual([`${a!.sessionId}-seg0`]);
    expect(dropped.map((d) => d.trajectoryId)).toEqual([`${b!.sessionId}-dropped`]);
    expect(ready[0]?.groupSize).toBe(2);
    const late = await post(`${b!.baseUrl}/chat/completions`, b!.apiKey, {
      messages: [{ role: "user", content: "hi" }],
    });
    expect(late.status).toBe(409);
    expect(String(late.json.error)).toMatch(/abandoned/);
  });

  it("caps calls per session, tokens per session and open sessions", async () => {
    const prompt = codec.promptTokens(firstMessages(0) as never, toolSpecs(exampleTask)).length;
    const h = await harness({ gateway: { maxCallsPerSession: 2, maxSessions: 2, maxTokensPerSession: prompt + 10 } });
    const s = await h.createSession();
    const ask = () => post(`${s.baseUrl}/chat/completions`, s.apiKey, { messages: firstMessages(0), tools });
    const first = await ask();
    expect(first.status).toBe(200);
    // the policy was asked for no more than the session's room
    expect(h.fake.requests[0]?.max_tokens).toBe(10);
    const second = await ask();
    expect(second.status).toBe(409);
    expect(String(second.json.error)).toMatch(/gateway.maxTokensPerSession/);
    const h2 = await harness({ gateway: { maxCallsPerSession: 2 } });
    const t = await h2.createSession();
    const again = () => post(`${t.baseUrl}/chat/completions`, t.apiKey, { messages: firstMessages(0), tools });
    expect((await again()).status).toBe(200);
    expect((await again()).status).toBe(200);
    const third = await again();
    expect(third.status).toBe(409);
    expect(String(third.json.error)).toMatch(/gateway.maxCallsPerSession/);
    await h.createSession();
    const over = await post(`${h.url}/v1/sessions`, ADMIN_KEY, {});
    expect(over.status).toBe(429);
    expect(String(over.json.error)).toMatch(/gateway.maxSessions/);
  });

  it("answers 400 naming the failing field, and 413 past limits.http.bodyLimitBytes", async () => {
    const h = await harness({ limits: { http: { bodyLimitBytes: 4096 } } });
    const bad = await post(`${h.url}/v1/sessions`, ADMIN_KEY, { groupId: "a/b", groupSize: 2 });
    expect(bad.status).toBe(400);
    expect(bad.json.issues).toEqual([expect.objectContaining({ path: "groupId" })]);
    const half = await post(`${h.url}/v1/sessions`, ADMIN_KEY, { groupId: "g" });
    expect(half.json.issues).toEqual([expect.objectContaining({ path: "groupSize" })]);
    const s = await h.createSession();
    const wrongRole = await post(`${s.baseUrl}/chat/completions`, s.apiKey, {
      messages: [{ role: "robot", content: "x" }],
    });
    expect(wrongRole.status).toBe(400);
    expect(JSON.stringify(wrongRole.json.issues)).toMatch(/messages\[0\]\.role/);
    const n2 = await post(`${s.baseUrl}/chat/completions`, s.apiKey, {
      messages: [{ role: "user", content: "x" }],
      n: 2,
    });
    expect(n2.status).toBe(400);
    expect(JSON.stringify(n2.json.issues)).toMatch(/"n"/);
    const reward = await post(`${h.url}/v1/sessions/${s.sessionId}/reward`, s.apiKey, { reward: "high" });
    expect(reward.json.issues).toEqual([expect.objectContaining({ path: "reward" })]);
    const big = await post(`${s.baseUrl}/chat/completions`, s.apiKey, {
      messages: [{ role: "user", content: "x".repeat(5000) }],
    });
    expect(big.status).toBe(413);
    expect(h.fake.requests).toHaveLength(0);
  });
});
