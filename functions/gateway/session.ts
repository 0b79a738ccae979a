import type { ChatCodec } from "../../shared/chat/codec.ts";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";
import { extendsTokens, type RecordedTurn, relationTo } from "./conversation.ts";

/** The chat-format helpers the gateway needs (ChatCodec). */
export type GatewayCodec = Pick<ChatCodec, "promptTokens" | "continuationTokens" | "assistantTokens">;

/** One chat completion served to a session, as recorded. */
export interface CallRecord extends RecordedTurn {
  readonly completionId: string;
  /** Order of completion within the session (0, 1, ...). */
  readonly index: number;
  readonly tools: readonly ToolSpec[];
  readonly finishReason: "stop" | "length" | "tool_calls";
  /** Prompt ids the policy conditioned on (sent to it as `agentrl.prompt_token_ids`). */
  readonly promptIds: readonly number[];
  /** Generated ids (or, from an external pool member, the canonical tokens of its answer). */
  readonly completionIds: readonly number[];
  /** Behaviour log-probs of the generated ids (rollout.behaviorLogprobs), and the full-vocabulary ones. */
  readonly logprobs: readonly number[];
  readonly fullLogprobs: readonly number[];
  /** Policy version of each generated id (-1 where unknown). */
  readonly versions: readonly number[];
  readonly pool: string;
  /** Whether the completion carries a token trace the trainer may learn from. */
  readonly traced: boolean;
  /** The answer's tool calls as parsed by the policy server. */
  readonly toolCalls: ReadonlyArray<{ readonly name: string; readonly arguments: string }>;
  /** The request re-sent this session's history as continuing a recorded call (same answer): its prompt extends that call's tokens. */
  readonly continued: boolean;
  /** The request claimed a recorded call's history but the tokens do not match: re-tokenization drift. */
  readonly drift: boolean;
  /** A continued call whose messages, rendered afresh, would not have given the recorded tokens (what naive re-tokenizing would have trained). */
  readonly renderMismatch: boolean;
  reward?: number;
  readonly policyMs: number;
}

/** The prompt of a new call and how it relates to the calls before it. */
export interface PlannedPrompt {
  readonly promptIds: number[];
  /** Leading prompt ids already recorded by the call it continues (not counted again against the token cap). */
  readonly reusedTokens: number;
  readonly continued: boolean;
  readonly drift: boolean;
  readonly renderMismatch: boolean;
}

function sameIds(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && extendsTokens(a, b);
}

/**
 * The prompt ids of a request. When it re-sends a recorded call's messages and answer (newest
 * such call first), the prompt is that call's prompt + completion ids + the tokens of the new
 * messages: the answer is never tokenized again, so the trajectory continues token for token.
 * Otherwise the messages are rendered afresh; if they claim a recorded call's history but depart
 * from its answer and the rendering does not extend its tokens, the call is marked as drift: it
 * starts a trajectory of its own and the changed answer is context there, never trained.
 */
export function planPrompt(
  codec: GatewayCodec,
  calls: readonly CallRecord[],
  messages: readonly ChatMessage[],
  tools: readonly ToolSpec[],
  toolsKey: string,
): PlannedPrompt {
  const rendered = (): number[] => codec.promptTokens(messages, tools);
  let diverged: CallRecord[] = [];
  for (let i = calls.length - 1; i >= 0; i--) {
    const call = calls[i] as CallRecord;
    const relation = relationTo(call, messages, toolsKey);
    if (relation.kind === "continues") {
      const before = [...call.messages, call.answer];
      const promptIds = [
        ...call.promptIds,
        ...call.completionIds,
        ...codec.continuationTokens(before, relation.tail, tools, call.completionIds),
      ];
      const reusedTokens = call.promptIds.length + call.completionIds.length;
      return {
        promptIds,
        reusedTokens,
        continued: true,
        drift: false,
        renderMismatch: !sameIds(rendered(), promptIds),
      };
    }
    if (relation.kind === "diverges") diverged = [...diverged, call];
  }
  const promptIds = rendered();
  const drift =
    diverged.length > 0 &&
    !diverged.some((call) => extendsTokens(promptIds, [...call.promptIds, ...call.completionIds]));
  return { promptIds, reusedTokens: 0, continued: false, drift, renderMismatch: false };
}

/** A session's life: open (calls allowed), ended (waiting for its group), released, or abandoned. */
export type SessionState = "open" | "ended" | "released" | "abandoned";

/** Everything the gateway holds about one session (in memory: a gateway restart loses open sessions). */
export interface Session {
  readonly sessionId: string;
  /** sha256 of the session key; the key itself is never stored. */
  readonly keyDigest: Buffer;
  readonly task: string;
  readonly groupId?: string;
  readonly groupSize?: number;
  readonly metadata: Readonly<Record<string, string | number | boolean>>;
  readonly createdAt: number;
  lastActivity: number;
  state: SessionState;
  readonly calls: CallRecord[];
  /** Calls being served now (the session is not idle while one runs). */
  inFlight: number;
  /** Prompt + generated tokens recorded so far (gateway.maxTokensPerSession). */
  tokens: number;
  reward?: number;
  /** Why it was abandoned, or why its group let it go untrained. */
  reason?: string;
  /** Trajectories exported at release. */
  trajectoryIds: string[];
}

/** The assistant message answered to a request, recorded with its call. */
export type Answer = AssistantMessage;
