import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";

/**
 * Helpers for scripted agents (experts, random baselines): they read the same messages an LLM
 * would and answer with ordinary assistant messages carrying one tool call.
 */

/** An assistant message that calls `name` with `args` (arguments serialised as OpenAI sends them). */
export function callTool(
  name: string,
  args: Record<string, unknown>,
  turn: number,
  thought?: string,
): AssistantMessage {
  return {
    role: "assistant",
    content: thought ?? null,
    tool_calls: [{ id: `call_${turn}`, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  };
}

/** How many assistant turns the conversation already holds. */
export function turnsSoFar(messages: readonly ChatMessage[]): number {
  return messages.filter((m) => m.role === "assistant").length;
}

/** Text of the last tool message, or "" before the first tool call. */
export function lastObservation(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role === "tool") return message.content;
  }
  return "";
}

/** All tool observations, oldest first. */
export function observations(messages: readonly ChatMessage[]): string[] {
  return messages.flatMap((m) => (m.role === "tool" ? [m.content] : []));
}

/** Text of the first user message (the task statement). */
export function taskStatement(messages: readonly ChatMessage[]): string {
  const user = messages.find((m) => m.role === "user");
  return user?.role === "user" ? user.content : "";
}
