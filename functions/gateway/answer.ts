import type { AssistantMessage } from "../../shared/protocol/openai.ts";

/** What one call answers the agent, before it is shaped as JSON or as an SSE stream. */
export interface AnswerParts {
  readonly completionId: string;
  readonly model: string;
  readonly created: number;
  readonly message: AssistantMessage;
  readonly finishReason: "stop" | "length" | "tool_calls";
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** vLLM's `return_token_ids`: the prompt and generated ids, as recorded. */
  readonly tokenIds?: { readonly prompt: readonly number[]; readonly completion: readonly number[] };
}

function usage(parts: AnswerParts) {
  return {
    prompt_tokens: parts.promptTokens,
    completion_tokens: parts.completionTokens,
    total_tokens: parts.promptTokens + parts.completionTokens,
  };
}

/** The OpenAI `chat.completion` object (plus `prompt_token_ids` / `choices[].token_ids` when asked). */
export function completionJson(parts: AnswerParts): Record<string, unknown> {
  return {
    id: parts.completionId,
    object: "chat.completion",
    created: parts.created,
    model: parts.model,
    choices: [
      {
        index: 0,
        message: parts.message,
        finish_reason: parts.finishReason,
        logprobs: null,
        ...(parts.tokenIds ? { token_ids: [...parts.tokenIds.completion] } : {}),
      },
    ],
    usage: usage(parts),
    ...(parts.tokenIds ? { prompt_token_ids: [...parts.tokenIds.prompt] } : {}),
  };
}

/**
 * The same answer as an SSE stream of `chat.completion.chunk`s, as OpenAI streams it: the role
 * and content, each tool call whole (index, id, name, arguments), the finish reason, usage when
 * `include_usage`, then `[DONE]`. The policy answers whole, so the chunks come at once.
 */
export function completionStream(parts: AnswerParts, includeUsage: boolean): string {
  const base = { id: parts.completionId, object: "chat.completion.chunk", created: parts.created, model: parts.model };
  const chunk = (delta: Record<string, unknown>, finish: string | null, extra: Record<string, unknown> = {}) => ({
    ...base,
    choices: [{ index: 0, delta, finish_reason: finish, logprobs: null, ...extra }],
  });
  const chunks: unknown[] = [
    {
      ...chunk({ role: "assistant", content: parts.message.content ?? "" }, null),
      ...(parts.tokenIds ? { prompt_token_ids: [...parts.tokenIds.prompt] } : {}),
    },
  ];
  (parts.message.tool_calls ?? []).forEach((call, index) => {
    chunks.push(chunk({ tool_calls: [{ index, id: call.id, type: "function", function: call.function }] }, null));
  });
  chunks.push(chunk({}, parts.finishReason, parts.tokenIds ? { token_ids: [...parts.tokenIds.completion] } : {}));
  if (includeUsage) chunks.push({ ...base, choices: [], usage: usage(parts) });
  return `${chunks.map((c) => `data: ${JSON.stringify(c)}\n\n`).join("")}data: [DONE]\n\n`;
}
