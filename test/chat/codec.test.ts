import { describe, expect, it } from "vitest";
import { ChatCodec, ChatTemplateError, parseAssistant } from "../../shared/chat/index.ts";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";

const tools: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "bash_action",
      description: "Run a bash script",
      parameters: { type: "object", properties: { script: { type: "string" } }, required: ["script"] },
    },
  },
  {
    type: "function",
    function: {
      name: "answer_action",
      description: "Give the final answer",
      parameters: { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] },
    },
  },
];

const call = (id: string, name: string, args: Record<string, unknown>) => ({
  id,
  type: "function" as const,
  function: { name, arguments: JSON.stringify(args) },
});

const conversation: ChatMessage[] = [
  { role: "system", content: "You are an agent in a Linux shell." },
  { role: "user", content: "How many files are in /tmp? Answer with a number." },
  { role: "assistant", content: null, tool_calls: [call("c0", "bash_action", { script: "ls /tmp | wc -l" })] },
  { role: "tool", tool_call_id: "c0", name: "bash_action", content: "3\n" },
  {
    role: "assistant",
    content: "Checking twice, to be sure — ünïcode ok.",
    tool_calls: [call("c1", "bash_action", { script: "ls -A /tmp" }), call("c2", "bash_action", { script: "pwd" })],
  },
  { role: "tool", tool_call_id: "c1", content: "a\nb\nc" },
  { role: "tool", tool_call_id: "c2", content: "/root" },
  { role: "assistant", content: null, tool_calls: [call("c3", "answer_action", { answer: "3" })] },
];

const codec = ChatCodec.train(
  [
    { messages: conversation, tools },
    { messages: conversation.slice(1), tools },
  ],
  700,
);

describe("chat template", () => {
  it("renders Hermes-style tool markup with the tools in <tools></tools>", () => {
    const text = codec.render(conversation, tools, true);
    expect(text.startsWith("<|im_start|>system\nYou are an agent in a Linux shell.\n\n# Tools\n")).toBe(true);
    expect(text).toContain('<tools>\n{"name": "bash_action", "description": "Run a bash script", "parameters": ');
    expect(text).toContain(
      '<|im_start|>assistant\n<tool_call>{"name": "bash_action", "arguments": {"script": "ls /tmp | wc -l"}}</tool_call><|im_end|>\n',
    );
    // Consecutive tool results share one user turn.
    expect(text).toContain(
      "<|im_start|>user\n<tool_response>a\nb\nc</tool_response><tool_response>/root</tool_response><|im_end|>\n",
    );
    expect(text.endsWith("<|im_start|>assistant\n")).toBe(true);
  });

  it("keeps the system prompt short", () => {
    const prompt = codec.promptTokens(conversation.slice(0, 2), tools);
    expect(codec.render(conversation.slice(0, 2), tools, true).length).toBeLessThan(900);
    expect(prompt.length).toBeLessThan(400);
  });

  it("renders without tools and without a system message", () => {
    expect(codec.render([{ role: "user", content: "hi" }], undefined, true)).toBe(
      "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  it("parses a rendered assistant turn back into the same message", () => {
    for (const [i, message] of conversation.entries()) {
      if (message.role !== "assistant") continue;
      const ids = codec.assistantTokens(conversation.slice(0, i), message, tools);
      const parsed = codec.parseGenerated(ids, "x").message;
      expect(parsed.content).toBe(message.content);
      expect(parsed.tool_calls?.map((c) => c.function)).toEqual(message.tool_calls?.map((c) => c.function));
    }
  });
});

describe("tool-call parsing", () => {
  it("parses calls, accepts arguments given as JSON text, and numbers ids", () => {
    const parsed = parseAssistant(
      'thinking\n<tool_call>{"name": "a", "arguments": {"x": [1, 2]}}</tool_call>\n<tool_call>{"name": "b", "arguments": "{\\"y\\": true}"}</tool_call>',
      "id",
    );
    expect(parsed).toEqual({
      role: "assistant",
      content: "thinking",
      tool_calls: [
        { id: "id_0", type: "function", function: { name: "a", arguments: '{"x":[1,2]}' } },
        { id: "id_1", type: "function", function: { name: "b", arguments: '{"y":true}' } },
      ],
    });
  });

  it.each([
    ["broken JSON", '<tool_call>{"name": "a", "arguments": {</tool_call>'],
    ["missing name", '<tool_call>{"arguments": {}}</tool_call>'],
    ["arguments not an object", '<tool_call>{"name": "a", "arguments": [1]}</tool_call>'],
    ["cut off", '<tool_call>{"name": "a", "argu'],
    ["plain text", "I will not call a tool."],
  ])("keeps %s as plain content", (_name, text) => {
    const parsed: AssistantMessage = parseAssistant(text);
    expect(parsed.tool_calls).toBeUndefined();
    expect(parsed.content).toBe(text);
  });

  it("keeps a bad block as content next to a good call", () => {
    const parsed = parseAssistant('<tool_call>oops</tool_call><tool_call>{"name": "a", "arguments": {}}</tool_call>');
    expect(parsed.content).toBe("<tool_call>oops</tool_call>");
    expect(parsed.tool_calls?.map((c) => c.function.name)).toEqual(["a"]);
  });

  it("returns null content for an empty generation", () => {
    expect(codec.parseGenerated([codec.endOfTurnId])).toEqual({
      text: "",
      message: { role: "assistant", content: null },
      stopped: true,
    });
  });
});

describe("loss mask and agent-loop tokens", () => {
  it("masks exactly the assistant tokens, and the whole sequence decodes to the full render", () => {
    const { tokens, lossMask } = codec.encodeConversation(conversation, tools);
    expect(tokens).toHaveLength(lossMask.length);
    const full = codec.render(conversation, tools, false);
    // The sequence ends with the last assistant turn's <|im_end|> (its newline is not generated).
    expect(codec.decode(tokens)).toBe(full.slice(0, -1));

    // Contiguous mask-1 spans decode to the assistant turns' bodies followed by <|im_end|>.
    const spans: number[][] = [];
    lossMask.forEach((m, i) => {
      if (m === 1) {
        if (lossMask[i - 1] !== 1) spans.push([]);
        spans[spans.length - 1]?.push(tokens[i] as number);
      }
    });
    const assistants = conversation.flatMap((m, i) => (m.role === "assistant" ? [i] : []));
    expect(spans).toHaveLength(assistants.length);
    spans.forEach((span, k) => {
      const index = assistants[k] as number;
      const before = codec.render(conversation.slice(0, index), tools, true);
      const after = codec.render(conversation.slice(0, index + 1), tools, false);
      expect(codec.decode(span)).toBe(after.slice(before.length, -1));
      expect(span[span.length - 1]).toBe(codec.endOfTurnId);
    });
    // Every other token is prompt/observation: the mask-0 text holds no assistant body.
    const maskedOut = codec.decode(tokens.filter((_, i) => lossMask[i] === 0));
    expect(maskedOut).not.toContain("ls /tmp | wc -l");
    expect(maskedOut).toContain("<tool_response>3\n</tool_response>");
  });

  it("prompt + generated + continuation tokens equal the tokens of the next prompt's text", () => {
    let messages: ChatMessage[] = conversation.slice(0, 2);
    let tokens = codec.promptTokens(messages, tools);
    for (const [i, message] of conversation.entries()) {
      if (i < 2 || message.role !== "assistant") continue;
      // What a model would emit: canonical tokens, as produced.
      const generated = codec.assistantTokens(messages, message, tools);
      const parsed = codec.parseGenerated(generated).message;
      messages = [...messages, parsed];
      let next = i + 1;
      while (next < conversation.length && conversation[next]?.role !== "assistant") next++;
      const observations = conversation.slice(i + 1, next);
      tokens = [...tokens, ...generated, ...codec.continuationTokens(messages, observations, tools, generated)];
      messages = [...messages, ...observations];
      expect(codec.decode(tokens)).toBe(codec.render(messages, tools, true));
    }
  });

  it("closes a turn cut by max_tokens with <|im_end|> (mask 0) before the observation", () => {
    const messages = conversation.slice(0, 2);
    const cut = codec.encode('<tool_call>{"name": "bash');
    const parsed = codec.parseGenerated(cut);
    expect(parsed.stopped).toBe(false);
    const obs: ChatMessage[] = [{ role: "user", content: "Please call a tool." }];
    const continuation = codec.continuationTokens([...messages, parsed.message], obs, tools, cut);
    expect(codec.decode(continuation)).toBe(
      "<|im_end|>\n<|im_start|>user\nPlease call a tool.<|im_end|>\n<|im_start|>assistant\n",
    );
  });

  it("refuses a continuation that does not follow an assistant message", () => {
    expect(() => codec.continuationTokens(conversation.slice(0, 2), [], tools)).toThrow(ChatTemplateError);
  });
});
