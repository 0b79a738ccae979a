import { describe, expect, it } from "vitest";
import { exampleTask } from "../../env-images/example/index.ts";
import { EpisodeSession } from "../../shared/env/session.ts";
import type { AssistantMessage } from "../../shared/protocol/openai.ts";

const never = new AbortController().signal;

function turn(calls: Array<{ name: string; arguments: string }>): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: calls.map((call, i) => ({ id: `c${i}`, type: "function", function: call })),
  };
}

async function session(): Promise<EpisodeSession> {
  return new EpisodeSession(exampleTask, await exampleTask.start(0, never));
}

describe("env worker: echoes and tool calls per turn are capped", () => {
  it("echoes an unknown tool name and invalid argument text back capped, not in full", async () => {
    const huge = "x".repeat(1_000_000);
    const unknown = await (await session()).interact(turn([{ name: huge, arguments: "{}" }]), never);
    expect(unknown.status).toBe("agent invalid action");
    expect(JSON.stringify(unknown.messages).length).toBeLessThan(2_000);
    expect(unknown.messages[0]?.content).toMatch(/999800 more characters/);
    const badJson = await (await session()).interact(turn([{ name: "add", arguments: `{${huge}` }]), never);
    expect(badJson.status).toBe("agent validation failed");
    expect(JSON.stringify(badJson.messages).length).toBeLessThan(2_000);
  });

  it("runs none of the calls of a turn with more than maxToolCallsPerTurn", async () => {
    const calls = Array.from({ length: 9 }, () => ({ name: "add", arguments: '{"a": 1, "b": 2}' }));
    const result = await (await session()).interact(turn(calls), never);
    expect(result.status).toBe("agent invalid action");
    expect(result.messages).toHaveLength(1);
    expect(result.messages[0]?.content).toMatch(/9 tool calls in one turn; at most 8/);
  });
});
