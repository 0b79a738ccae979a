import type { AssistantMessage, ToolCall } from "../protocol/openai.ts";

const TOOL_CALL_BLOCK = /<tool_call>([\s\S]*?)(?:<\/tool_call>|$)/g;

/**
 * Turns generated assistant text into an OpenAI assistant message. Every
 * `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` whose JSON parses (an object with a
 * non-empty string `name` and object `arguments`) becomes a tool call; everything else, including
 * a block that does not parse or is cut off, stays in `content` as plain text (null when empty).
 * Tool-call ids are `${idPrefix}_${i}`.
 * @example parseAssistant('<tool_call>{"name": "ls", "arguments": {}}</tool_call>').tool_calls?.[0]?.function.name // "ls"
 */
export function parseAssistant(text: string, idPrefix = "call"): AssistantMessage {
  const calls: ToolCall[] = [];
  let rest = "";
  let last = 0;
  for (const match of text.matchAll(TOOL_CALL_BLOCK)) {
    const parsed = parseCall(match[1] ?? "");
    if (!parsed) continue;
    rest += text.slice(last, match.index);
    last = match.index + match[0].length;
    calls.push({
      id: `${idPrefix}_${calls.length}`,
      type: "function",
      function: { name: parsed.name, arguments: JSON.stringify(parsed.arguments) },
    });
  }
  rest += text.slice(last);
  const content = rest.trim();
  const message: AssistantMessage = { role: "assistant", content: content === "" ? null : content };
  if (calls.length > 0) message.tool_calls = calls;
  return message;
}

function parseCall(body: string): { name: string; arguments: Record<string, unknown> } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body.trim());
  } catch {
    return undefined;
  }
  if (!isRecord(value) || typeof value.name !== "string" || value.name === "") return undefined;
  let args = value.arguments ?? {};
  if (typeof args === "string") {
    // Some models emit arguments as JSON text; accept it when it holds an object.
    try {
      args = JSON.parse(args);
    } catch {
      return undefined;
    }
  }
  if (!isRecord(args)) return undefined;
  return { name: value.name, arguments: args };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
