import type { ChatCompletionChoice, ChatCompletionResponse, GenerationTrace } from "../protocol/openai.ts";
import { POLICY_VERSION_HEADER } from "../protocol/openai.ts";

/**
 * How an endpoint reports what it generated:
 * - `agentrl`: the `agentrl` trace of our own policy server (ids, log-probs, per-token versions),
 *   and token-in through `agentrl.prompt_token_ids`;
 * - `vllm`: vLLM's `return_token_ids` (top-level `prompt_token_ids`, `choices[].token_ids`) and
 *   OpenAI's `logprobs.content[].logprob`, with the version from the `x-policy-version` header or
 *   the model name (`<name>-v<N>`, `<name>@v<N>`, `<name>:v<N>`, `<name>/v<N>`). The prompt is sent
 *   as messages; the engine's `prompt_token_ids` tell whether it rendered them as recorded.
 */
export type PolicyDialect = "agentrl" | "vllm";

/** Why a vLLM-dialect answer cannot become a trace. */
export class DialectError extends Error {
  override readonly name = "DialectError";
}

/** The version an answer's x-policy-version header names, if any. */
export function versionFromHeader(headers: Headers): number | undefined {
  const header = headers.get(POLICY_VERSION_HEADER);
  return header !== null && /^\d+$/.test(header.trim()) ? Number(header.trim()) : undefined;
}

/** The version a vLLM-dialect answer names: the header first, else a `v<N>` suffix of the model name. */
export function versionFromAnswer(headers: Headers, model: string): number | undefined {
  const header = versionFromHeader(headers);
  if (header !== undefined) return header;
  const match = /[-@:/]v(\d+)$/.exec(model);
  return match ? Number(match[1]) : undefined;
}

/**
 * A GenerationTrace from the OpenAI/vLLM fields of one choice; throws DialectError naming what is
 * missing. `syncedVersion` (from the engine's sync record, `rollout.versionSource: sync`) labels
 * the tokens instead of what the answer names; the caller compares the two once the record is confirmed.
 */
export function traceFromVllmAnswer(
  response: ChatCompletionResponse,
  choice: ChatCompletionChoice,
  headers: Headers,
  syncedVersion?: number,
): GenerationTrace {
  const ids = choice.token_ids;
  if (!ids) throw new DialectError("choices[0].token_ids is missing (send return_token_ids: true; vLLM >= 0.10.2)");
  const content = choice.logprobs?.content;
  if (!content) throw new DialectError("choices[0].logprobs.content is missing (send logprobs: true)");
  if (content.length !== ids.length)
    throw new DialectError(
      `choices[0].logprobs.content has ${content.length} entries for ${ids.length} token_ids (one log-prob per generated token)`,
    );
  const version = syncedVersion ?? versionFromAnswer(headers, response.model);
  if (version === undefined)
    throw new DialectError(
      `no policy version: send the ${POLICY_VERSION_HEADER} header, serve the model as <name>-v<N> (got model "${response.model}"), or sync the engine and set rollout.versionSource: sync`,
    );
  return {
    token_ids: ids,
    logprobs: content.map((entry) => entry.logprob),
    policy_versions: ids.map(() => version),
    ...(response.prompt_token_ids ? { prompt_token_ids: response.prompt_token_ids } : {}),
    prompt_truncated: false,
  };
}
