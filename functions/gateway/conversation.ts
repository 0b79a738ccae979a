import type { AssistantMessage, ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";

/**
 * Message-level comparison of an agent's re-sent history with what the gateway recorded. An
 * agent that keeps its own chat history sends the assistant answers back as it received them,
 * possibly re-serialized (`content: ""` for null, tool-call arguments with other spacing, new
 * tool-call ids); those are the same answer, and the gateway continues from the tokens it
 * recorded instead of tokenizing the text again.
 */

/** Tool-call arguments as a value (so `{"a":1}` and `{ "a": 1 }` compare equal); unparsable text stays text. */
function argumentsValue(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A canonical JSON text of a value: object keys sorted, so key order does not matter. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** What of a message the chat template renders; ids of tool calls are not rendered and may change. */
function renderedPart(message: ChatMessage): unknown {
  if (message.role !== "assistant") return message;
  return {
    role: "assistant",
    content: message.content ?? "",
    tool_calls: (message.tool_calls ?? []).map((c) => ({
      name: c.function.name,
      args: argumentsValue(c.function.arguments),
    })),
  };
}

/** True when two messages render the same (see renderedPart). */
export function sameMessage(a: ChatMessage, b: ChatMessage): boolean {
  return canonicalJson(renderedPart(a)) === canonicalJson(renderedPart(b));
}

/** True when `messages` begins with `prefix`, message by message. */
export function startsWithMessages(messages: readonly ChatMessage[], prefix: readonly ChatMessage[]): boolean {
  if (prefix.length > messages.length) return false;
  for (let i = 0; i < prefix.length; i++)
    if (!sameMessage(messages[i] as ChatMessage, prefix[i] as ChatMessage)) return false;
  return true;
}

/** Canonical text of a tool list: a call continues a conversation only under the same tools. */
export function toolsKey(tools: readonly ToolSpec[]): string {
  return canonicalJson(tools);
}

/** The part of a conversation the gateway recorded: the prompt messages and the answer returned. */
export interface RecordedTurn {
  readonly messages: readonly ChatMessage[];
  readonly answer: AssistantMessage;
  readonly toolsKey: string;
}

/** How a new request relates to a recorded turn. */
export type Relation =
  /** It re-sends the turn's messages and its answer (as the same answer): the rest is new. */
  | { readonly kind: "continues"; readonly tail: readonly ChatMessage[] }
  /** It re-sends the turn's messages, then an assistant message that is not the answer the gateway gave. */
  | { readonly kind: "diverges" }
  | { readonly kind: "unrelated" };

/** Whether `messages` (under `tools`) continues `turn`, departs from its answer, or is another conversation. */
export function relationTo(turn: RecordedTurn, messages: readonly ChatMessage[], tools: string): Relation {
  if (tools !== turn.toolsKey || !startsWithMessages(messages, turn.messages)) return { kind: "unrelated" };
  const next = messages[turn.messages.length];
  if (next?.role !== "assistant") return { kind: "unrelated" };
  if (!sameMessage(next, turn.answer)) return { kind: "diverges" };
  return { kind: "continues", tail: messages.slice(turn.messages.length + 1) };
}

/** True when `prefix` is a prefix of `ids` (equal length included). */
export function extendsTokens(ids: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > ids.length) return false;
  for (let i = 0; i < prefix.length; i++) if (ids[i] !== prefix[i]) return false;
  return true;
}
