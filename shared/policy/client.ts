import { AgentRlError, issuesOf } from "../../shared/errors.ts";
import {
  type AssistantMessage,
  type ChatCompletionRequest,
  ChatCompletionResponse,
  type ChatMessage,
  type GenerationTrace,
  type ToolSpec,
} from "../../shared/protocol/openai.ts";
import { bearerHeader } from "../security/bearer.ts";
import { DialectError, type PolicyDialect, traceFromVllmAnswer, versionFromHeader } from "./dialect.ts";
import { EngineRecordError, type EngineVersionWatch, type ReadyRecord, sameReady } from "./engine-sync.ts";

/**
 * A minimal OpenAI-compatible chat-completions client for the agent loop. It reads the
 * `agentrl` extension of a choice (generated token ids, their log-probs and the policy version
 * of each token) when the server sends one; any other OpenAI-compatible endpoint works too.
 */

/** The policy server could not answer (unreachable, timeout, 5xx, malformed answer): retry the episode with a fresh session. */
export class PolicyUnavailableError extends AgentRlError {
  override readonly name = "PolicyUnavailableError";
  readonly retryable = true;
}

/** The server refused the request (4xx): repeating it will fail the same way. */
export class PolicyRequestError extends AgentRlError {
  override readonly name = "PolicyRequestError";
  readonly retryable = false;
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** One member of the cross-policy pool. */
export interface PolicyEndpoint {
  /** Pool label recorded per token: `current`, `stale`, or `external:<model>`. */
  readonly pool: string;
  /** OpenAI base URL; `/v1` is appended when missing. */
  readonly url: string;
  readonly model: string;
  /** Whether answers must carry a token trace (true for the pools the trainer learns from). */
  readonly requiresTrace: boolean;
  /** How the endpoint reports token ids and log-probs (see PolicyDialect). @default "agentrl" */
  readonly dialect?: PolicyDialect;
  /** Sent as `authorization: Bearer <apiKey>` (our servers' AGENTRL_POLICY_API_KEY, or an external endpoint's key). */
  readonly apiKey?: string;
  /**
   * `rollout.versionSource: sync` (vLLM dialect): the version comes from the engine's sync record,
   * read before sending and after the answer; an answer between two different records is discarded.
   */
  readonly versionSync?: EngineVersionWatch;
}

/** What one assistant turn came back as. */
export interface Generation {
  readonly message: AssistantMessage;
  readonly finishReason: "stop" | "length" | "tool_calls";
  /** Present when the server reported token ids, log-probs and versions. */
  readonly trace?: GenerationTrace;
  /** Answers of this turn discarded because a weight reload may have touched them (`versionSync`). */
  readonly versionDiscards?: number;
}

export interface GenerateRequest {
  readonly messages: readonly ChatMessage[];
  readonly tools: readonly ToolSpec[];
  readonly temperature: number;
  readonly topP: number;
  readonly maxTokens: number;
  readonly seed?: number;
  /**
   * The prompt as the trajectory recorded it; sent as the `agentrl.prompt_token_ids` extension to
   * our own servers (endpoints with `requiresTrace`), so generated tokens are never re-tokenized.
   */
  readonly promptTokenIds?: readonly number[];
  /**
   * Sync mode: the newest published version; sent as `agentrl.newest_version` to our own servers,
   * which answer with their pool's version for it (RolloutRequest.policyVersion).
   */
  readonly newestVersion?: number;
}

/** Normalizes an OpenAI base URL so `${base}/chat/completions` is the endpoint. */
export function openAiBase(url: string): string {
  const trimmed = url.replace(/\/+$/, "");
  return trimmed.endsWith("/v1") ? trimmed : `${trimmed}/v1`;
}

/** Chat-completions caller with a per-request timeout. */
export class PolicyClient {
  constructor(
    private readonly timeoutMs: number,
    private readonly fetchImpl: typeof fetch = fetch,
  ) {}

  /** One completion (n = 1) from `endpoint`. */
  async generate(endpoint: PolicyEndpoint, request: GenerateRequest, signal?: AbortSignal): Promise<Generation> {
    const sync = endpoint.versionSync;
    if (sync === undefined) return (await this.generateOnce(endpoint, request, signal)).generation;
    for (let discards = 0; ; discards++) {
      let before: ReadyRecord;
      try {
        before = await sync.ready(this.timeoutMs, signal);
      } catch (error) {
        if (!(error instanceof EngineRecordError)) throw error;
        throw new PolicyUnavailableError(`policy ${endpoint.pool}: ${error.message}`, { cause: error });
      }
      const { generation, answered } = await this.generateOnce(endpoint, request, signal, before.version);
      const after = await sync.fresh().catch((error: unknown) => {
        throw new PolicyUnavailableError(`policy ${endpoint.pool}: ${(error as Error).message}`, { cause: error });
      });
      if (sameReady(before, after)) {
        if (answered !== undefined && answered !== before.version)
          throw new PolicyRequestError(
            `policy ${endpoint.pool}: the answer names version ${answered} but engine ${sync.engineId}'s sync record says v${before.version}: does rollout.syncEngine name the engine behind this URL?`,
            502,
          );
        return discards === 0 ? generation : { ...generation, versionDiscards: discards };
      }
      sync.discard(before, after);
      if (discards >= sync.retries)
        throw new PolicyUnavailableError(
          `policy ${endpoint.pool}: ${discards + 1} answers in a row straddled a weight reload of engine ${sync.engineId} (rollout.syncRetries ${sync.retries})`,
        );
    }
  }

  /**
   * One request. `syncedVersion` labels a vLLM-dialect answer (from the engine's sync record);
   * `answered` is the version its x-policy-version header named, if any.
   */
  private async generateOnce(
    endpoint: PolicyEndpoint,
    request: GenerateRequest,
    signal?: AbortSignal,
    syncedVersion?: number,
  ): Promise<{ generation: Generation; answered?: number }> {
    const vllm = endpoint.dialect === "vllm";
    const body: Partial<ChatCompletionRequest> = {
      model: endpoint.model,
      messages: [...request.messages],
      tools: request.tools.length > 0 ? [...request.tools] : undefined,
      temperature: request.temperature,
      top_p: request.topP,
      max_tokens: request.maxTokens,
      logprobs: true,
      n: 1,
      ...(request.seed === undefined ? {} : { seed: request.seed }),
      ...(vllm ? { return_token_ids: true } : {}),
      ...(!vllm && endpoint.requiresTrace ? agentrlExtension(request) : {}),
    };
    const url = `${openAiBase(endpoint.url)}/chat/completions`;
    const timeout = AbortSignal.timeout(this.timeoutMs);
    let response: Response;
    try {
      response = await this.fetchImpl(url, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearerHeader(endpoint.apiKey) },
        body: JSON.stringify(body),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      const why = timeout.aborted ? `timed out after ${this.timeoutMs} ms` : (error as Error).message;
      throw new PolicyUnavailableError(`policy ${endpoint.pool} at ${url}: ${why}`, { cause: error });
    }
    const text = await response.text().catch(() => "");
    if (response.status >= 400 && response.status < 500 && response.status !== 408 && response.status !== 429) {
      throw new PolicyRequestError(
        `policy ${endpoint.pool}: HTTP ${response.status}: ${text.slice(0, 500)}`,
        response.status,
      );
    }
    if (!response.ok)
      throw new PolicyUnavailableError(`policy ${endpoint.pool}: HTTP ${response.status}: ${text.slice(0, 300)}`);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new PolicyUnavailableError(`policy ${endpoint.pool}: answer is not JSON`);
    }
    const parsed = ChatCompletionResponse.safeParse(json);
    if (!parsed.success) {
      const issues = issuesOf(parsed.error).map((i) => `${i.path || "(root)"}: ${i.message}`);
      throw new PolicyUnavailableError(`policy ${endpoint.pool}: invalid answer: ${issues.join("; ")}`);
    }
    const choice = parsed.data.choices[0];
    if (!choice) throw new PolicyUnavailableError(`policy ${endpoint.pool}: answer has no choices`);
    if (vllm) {
      // Only the header is checked against a sync record: a model name may end in -v<N> by chance.
      const answered = versionFromHeader(response.headers);
      const named = answered === undefined ? {} : { answered };
      try {
        const trace = traceFromVllmAnswer(parsed.data, choice, response.headers, syncedVersion);
        return { generation: { message: choice.message, finishReason: choice.finish_reason, trace }, ...named };
      } catch (error) {
        if (!(error instanceof DialectError)) throw error;
        // Without ids and log-probs the turn cannot be learned from; an external baseline can still act.
        if (endpoint.requiresTrace)
          throw new PolicyRequestError(`policy ${endpoint.pool}: vLLM-dialect answer: ${error.message}`, 502);
        return { generation: { message: choice.message, finishReason: choice.finish_reason }, ...named };
      }
    }
    if (endpoint.requiresTrace) {
      const trace = choice.agentrl;
      if (!trace) throw new PolicyUnavailableError(`policy ${endpoint.pool}: answer lacks the agentrl token trace`);
      const n = trace.token_ids.length;
      const sampled = trace.sampled_logprobs?.length ?? n;
      if (trace.logprobs.length !== n || trace.policy_versions.length !== n || sampled !== n)
        throw new PolicyUnavailableError(
          `policy ${endpoint.pool}: trace lengths differ (ids ${n}, logprobs ${trace.logprobs.length}, sampled_logprobs ${sampled}, versions ${trace.policy_versions.length})`,
        );
    }
    return { generation: { message: choice.message, finishReason: choice.finish_reason, trace: choice.agentrl } };
  }
}

/** The `agentrl` request extension for our own servers: the recorded prompt ids and the pinned version. */
function agentrlExtension(request: GenerateRequest): Pick<ChatCompletionRequest, "agentrl"> {
  const agentrl = {
    ...(request.promptTokenIds && request.promptTokenIds.length > 0
      ? { prompt_token_ids: [...request.promptTokenIds] }
      : {}),
    ...(request.newestVersion === undefined ? {} : { newest_version: request.newestVersion }),
  };
  return Object.keys(agentrl).length > 0 ? { agentrl } : {};
}
