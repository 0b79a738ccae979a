import type { ChatMessage } from "../../shared/protocol/openai.ts";

/** Every text of a conversation, one message per line: contents, and the assistant's tool-call arguments. */
export const messagesText = (messages: readonly ChatMessage[]): string =>
  messages
    .map((m) =>
      m.role === "assistant"
        ? `${m.content ?? ""} ${m.tool_calls?.map((c) => c.function.arguments).join(" ")}`
        : m.content,
    )
    .join("\n");
