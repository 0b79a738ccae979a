import type { Trajectory } from "../../shared/protocol/messages.ts";
import type { ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";
import { TokenLog } from "../../shared/protocol/tokenLog.ts";
import { extendsTokens } from "./conversation.ts";
import type { CallRecord, Session } from "./session.ts";

/**
 * From recorded calls to trajectories. Calls are taken in the order they completed; a call
 * whose prompt ids extend a segment's tokens (its last call's prompt + completion) exactly
 * continues that segment: the new prompt tokens are context (loss mask 0) and its completion is
 * trained (mask 1). Any other call starts a new segment. Each segment is one trajectory, and all
 * segments of a session share the session's reward (or a call's own reward, see segmentReward):
 * a sub-agent call or a summarization step with a fresh prompt is learned from like the main
 * conversation, without joining token sequences that never followed each other.
 */

/** One segment: its calls, and their tokens as a Trajectory holds them. */
export interface Segment {
  readonly calls: CallRecord[];
  readonly tokens: TokenLog;
}

function appendCall(segment: Segment, call: CallRecord): void {
  segment.tokens.context(call.promptIds.slice(segment.tokens.length));
  // only traced tokens of our own pools are trained; an external member's answer is context
  if (call.traced)
    segment.tokens.generated(call.completionIds, call.logprobs, call.fullLogprobs, call.versions, call.pool);
  else segment.tokens.context(call.completionIds, call.pool);
  segment.calls.push(call);
}

/** Merges calls into segments by exact token prefix (see the module comment). */
export function mergeCalls(calls: readonly CallRecord[]): Segment[] {
  const segments: Segment[] = [];
  for (const call of [...calls].sort((a, b) => a.index - b.index)) {
    // the newest segment first: an agent that re-sends its history continues its latest turn
    let target: Segment | undefined;
    for (let i = segments.length - 1; i >= 0 && !target; i--)
      if (extendsTokens(call.promptIds, (segments[i] as Segment).tokens.tokenIds)) target = segments[i];
    if (!target) {
      target = { calls: [], tokens: new TokenLog() };
      segments.push(target);
    }
    appendCall(target, call);
  }
  return segments;
}

/** Reward of a segment: the last per-call reward among its calls, else the session's. */
export function segmentReward(segment: Segment, sessionReward: number | undefined): number | undefined {
  for (let i = segment.calls.length - 1; i >= 0; i--) {
    const reward = (segment.calls[i] as CallRecord).reward;
    if (reward !== undefined) return reward;
  }
  return sessionReward;
}

/** What the viewer shows per call of a gateway trajectory (token offsets into the trajectory). */
export type CallSpan = NonNullable<Trajectory["gatewayCalls"]>[number];

function spansOf(segment: Segment): CallSpan[] {
  let offset = 0;
  return segment.calls.map((call) => {
    const promptEnd = call.promptIds.length;
    offset = promptEnd + call.completionIds.length;
    return {
      completionId: call.completionId,
      promptEnd,
      end: offset,
      pool: call.pool,
      policyVersion: call.versions.find((v) => v >= 0) ?? -1,
      toolCalls: call.toolCalls.map((c) => c.name),
      drift: call.drift,
    };
  });
}

export interface ExportContext {
  readonly experimentId: string;
  readonly groupId: string;
  /** Trajectories + dropped members of the whole group: what the trainer waits for. */
  readonly groupSize: number;
  /** First sample number of this session's trajectories within the group. */
  readonly firstSample: number;
  readonly behaviorLogprobs: "sampled" | "full";
  /** Counters stamped on every trajectory (`gateway_*`), for the trainer's metrics line. */
  readonly counters: Readonly<Record<string, number>>;
}

/** Trajectory id of a session's k-th segment: stable, so a re-export replaces rather than duplicates. */
export function segmentTrajectoryId(sessionId: string, k: number): string {
  return `${sessionId}-seg${k}`;
}

/** The session's segments as Trajectories (the session must have a reward). */
export function trajectoriesOf(session: Session, segments: readonly Segment[], context: ExportContext): Trajectory[] {
  const driftCalls = session.calls.filter((c) => c.drift).length;
  return segments.map((segment, k) => {
    const last = segment.calls[segment.calls.length - 1] as CallRecord;
    const messages: ChatMessage[] = [...last.messages, last.answer];
    const tools: ToolSpec[] = [...last.tools];
    const reward = segmentReward(segment, session.reward) ?? 0;
    const { tokens } = segment;
    const trained = tokens.lossMask.reduce<number>((sum, m) => sum + m, 0);
    const policyMs = segment.calls.reduce((sum, c) => sum + c.policyMs, 0);
    return {
      schemaVersion: 1,
      trajectoryId: segmentTrajectoryId(session.sessionId, k),
      experimentId: context.experimentId,
      groupId: context.groupId,
      task: session.task,
      index: 0,
      sample: context.firstSample + k,
      groupSize: context.groupSize,
      messages,
      tools,
      tokenIds: tokens.tokenIds,
      lossMask: tokens.lossMask,
      logprobs: tokens.logprobs,
      behaviorLogprobs: context.behaviorLogprobs,
      ...(context.behaviorLogprobs === "full" ? {} : { fullLogprobs: tokens.fullLogprobs }),
      policyVersion: tokens.policyVersion,
      policyPool: tokens.policyPool,
      reward,
      envReward: reward,
      status: "completed",
      turns: segment.calls.length,
      metrics: {
        generated_tokens: trained,
        gateway_calls: segment.calls.length,
        gateway_merged_calls: segment.calls.length - 1,
        gateway_session_segments: segments.length,
        gateway_drift_calls: segment.calls.filter((c) => c.drift).length,
        gateway_session_drift_calls: driftCalls,
        gateway_render_mismatches: segment.calls.filter((c) => c.renderMismatch).length,
        stale_turns: segment.calls.filter((c) => c.pool === "stale").length,
        external_turns: segment.calls.filter((c) => !c.traced).length,
        ...context.counters,
      },
      timings: {
        startedAt: new Date(session.createdAt).toISOString(),
        finishedAt: new Date(session.lastActivity).toISOString(),
        envMs: 0,
        policyMs,
      },
      gatewayCalls: spansOf(segment),
      attempt: 0,
    };
  });
}
