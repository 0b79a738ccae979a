import { AgentRlError } from "../errors.ts";
import {
  type ChatCompletionRequest,
  ChatCompletionResponse,
  type ChatMessage,
  type ToolSpec,
} from "../protocol/openai.ts";

/** The policy endpoint could not answer (connection, timeout, 5xx): an infrastructure failure. */
export class PolicyUnavailableError extends AgentRlError {
  override readonly name = "PolicyUnavailableError";
}

/** The endpoint rejected the request (4xx), e.g. a prompt past its context window. */
export class PolicyRequestError extends AgentRlError {
  override readonly name = "PolicyRequestError";
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

export interface PolicyEndpoint {
  /** OpenAI-compatible base URL including `/v1`, e.g. `http://127.0.0.1:8000/v1`. */
  readonly url: string;
  /** Model name sent in requests. @default "agentrl" */
  readonly model?: string;
  /** Bearer token, for hosted endpoints. */
  readonly apiKey?: string;
}

export interface CompletionOptions {
  readonly temperature?: number;
  readonly topP?: number;
  readonly maxTokens?: number;
  readonly seed?: number;
  readonly logprobs?: boolean;
  readonly signal?: AbortSignal;
  /** @default 300000 */
  readonly timeoutMs?: number;
  /** Retries on connection errors and 5xx (never on 4xx). @default 2 */
  readonly retries?: number;
}

/**
 * Minimal OpenAI chat-completions client for any compatible endpoint (our policy server, vLLM,
 * SGLang, a hosted model). Answers are validated with zod, including the `agentrl` extension
 * our server adds to each choice.
 */
export class PolicyClient {
  constructor(readonly endpoint: PolicyEndpoint) {}

  async complete(
    messages: readonly ChatMessage[],
    tools: readonly ToolSpec[],
    options: CompletionOptions = {},
  ): Promise<ChatCompletionResponse> {
    const body: Partial<ChatCompletionRequest> = {
      model: this.endpoint.model ?? "agentrl",
      messages: [...messages],
      ...(tools.length > 0 ? { tools: [...tools] } : {}),
      temperature: options.temperature ?? 1,
      top_p: options.topP ?? 1,
      ...(options.maxTokens !== undefined ? { max_tokens: options.maxTokens } : {}),
      ...(options.seed !== undefined ? { seed: options.seed } : {}),
      logprobs: options.logprobs ?? false,
    };
    const retries = options.retries ?? 2;
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        const signals = [AbortSignal.timeout(options.timeoutMs ?? 300_000)];
        if (options.signal) signals.push(options.signal);
        response = await fetch(`${this.endpoint.url.replace(/\/$/, "")}/chat/completions`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            ...(this.endpoint.apiKey ? { authorization: `Bearer ${this.endpoint.apiKey}` } : {}),
          },
          body: JSON.stringify(body),
          signal: AbortSignal.any(signals),
        });
      } catch (error) {
        if (options.signal?.aborted || attempt >= retries)
          throw new PolicyUnavailableError(`policy ${this.endpoint.url} unreachable: ${(error as Error).message}`, {
            cause: error,
          });
        await sleep(250 * 2 ** attempt);
        continue;
      }
      const text = await response.text();
      if (response.status >= 500) {
        if (attempt >= retries)
          throw new PolicyUnavailableError(
            `policy ${this.endpoint.url} answered ${response.status}: ${text.slice(0, 300)}`,
          );
        await sleep(250 * 2 ** attempt);
        continue;
      }
      if (!response.ok)
        throw new PolicyRequestError(`policy rejected the request: ${text.slice(0, 500)}`, response.status);
      const parsed = ChatCompletionResponse.safeParse(safeJson(text));
      if (!parsed.success)
        throw new PolicyUnavailableError(
          `policy ${this.endpoint.url} answered a malformed completion: ${parsed.error.message}`,
        );
      return parsed.data;
    }
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
