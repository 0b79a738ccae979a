import { describe, expect, it } from "vitest";
import { gatewayCallsHtml } from "../../cli/view/pages.ts";
import { mergeCalls, segmentReward } from "../../functions/gateway/export.ts";
import type { CallRecord } from "../../functions/gateway/session.ts";
import type { Trajectory } from "../../shared/protocol/messages.ts";
import { gatewayMetrics } from "../../trainer-image/trainer/metrics.ts";

/** A recorded call with just the token fields the merge reads. */
function call(
  index: number,
  promptIds: number[],
  completionIds: number[],
  extra: Partial<CallRecord> = {},
): CallRecord {
  return {
    completionId: `c${index}`,
    index,
    messages: [],
    answer: { role: "assistant", content: "" },
    toolsKey: "[]",
    tools: [],
    finishReason: "stop",
    promptIds,
    completionIds,
    logprobs: completionIds.map(() => -0.5),
    fullLogprobs: completionIds.map(() => -0.4),
    versions: completionIds.map(() => 2),
    pool: "current",
    traced: true,
    toolCalls: [],
    continued: false,
    drift: false,
    renderMismatch: false,
    policyMs: 1,
    ...extra,
  };
}

describe("mergeCalls: exact token prefix", () => {
  it("continues a segment when the prompt extends its prompt + completion; mask 1 on completions only", () => {
    // call 0: prompt [1 2 3], completion [4 5]; call 1: prompt [1 2 3 4 5 6 7] (new: 6 7), completion [8]
    const [segment, ...rest] = mergeCalls([call(0, [1, 2, 3], [4, 5]), call(1, [1, 2, 3, 4, 5, 6, 7], [8])]);
    expect(rest).toEqual([]);
    expect(segment?.tokens.tokenIds).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(segment?.tokens.lossMask).toEqual([0, 0, 0, 1, 1, 0, 0, 1]);
    expect(segment?.tokens.logprobs).toEqual([0, 0, 0, -0.5, -0.5, 0, 0, -0.5]);
    expect(segment?.tokens.fullLogprobs).toEqual([0, 0, 0, -0.4, -0.4, 0, 0, -0.4]);
    expect(segment?.tokens.policyVersion).toEqual([-1, -1, -1, 2, 2, -1, -1, 2]);
    expect(segment?.tokens.policyPool).toEqual([null, null, null, "current", "current", null, null, "current"]);
  });

  it("starts a new segment when one token differs, and keeps an external member's answer as context", () => {
    // call 1 differs at position 3 (9 instead of 4): a new segment, all of its prompt context
    const segments = mergeCalls([
      call(0, [1, 2, 3], [4, 5]),
      call(1, [1, 2, 3, 9, 5, 6], [7], { traced: false, pool: "external:m" }),
      call(2, [1, 2, 3, 4, 5, 6], [8]),
    ]);
    expect(segments.map((s) => s.tokens.tokenIds)).toEqual([
      [1, 2, 3, 4, 5, 6, 8],
      [1, 2, 3, 9, 5, 6, 7],
    ]);
    expect(segments[1]?.tokens.lossMask).toEqual([0, 0, 0, 0, 0, 0, 0]);
    expect(segments[1]?.tokens.policyVersion.at(-1)).toBe(-1);
    expect(segments[0]?.calls.map((c) => c.completionId)).toEqual(["c0", "c2"]);
  });

  it("takes calls in completion order, whatever order they are listed in", () => {
    const segments = mergeCalls([call(1, [1, 2, 3, 4], [5]), call(0, [1, 2], [3])]);
    expect(segments).toHaveLength(1);
    expect(segments[0]?.tokens.tokenIds).toEqual([1, 2, 3, 4, 5]);
  });

  it("a segment's reward is its last per-call reward, else the session's", () => {
    const [segment] = mergeCalls([call(0, [1], [2], { reward: 0.3 }), call(1, [1, 2, 3], [4])]);
    expect(segmentReward(segment!, 1)).toBe(0.3);
    const [plain] = mergeCalls([call(0, [1], [2])]);
    expect(segmentReward(plain!, 1)).toBe(1);
    expect(segmentReward(plain!, undefined)).toBeUndefined();
  });
});

describe("gatewayMetrics", () => {
  const t = (metrics: Record<string, number>) => ({ metrics }) as unknown as Trajectory;
  it("sums per-trajectory counts, takes the newest totals, and says nothing for rollout-only steps", () => {
    expect(gatewayMetrics([t({ generated_tokens: 4 })])).toEqual({});
    const m = gatewayMetrics([
      t({
        gateway_calls: 3,
        gateway_merged_calls: 2,
        gateway_session_segments: 1,
        gateway_total_sessions: 5,
        gateway_total_abandoned: 1,
      }),
      t({
        gateway_calls: 1,
        gateway_drift_calls: 1,
        gateway_session_segments: 2,
        gateway_total_sessions: 7,
        gateway_total_abandoned: 1,
      }),
      t({ generated_tokens: 9 }),
    ]);
    expect(m).toMatchObject({
      "gateway/trajectories": 2,
      "gateway/calls": 4,
      "gateway/merged_calls": 2,
      "gateway/split_segments": 1,
      "gateway/drift_calls": 1,
      "gateway/sessions_total": 7,
      "gateway/abandoned_total": 1,
    });
  });
});

describe("viewer: a gateway trajectory shows its calls", () => {
  it("one row per call with offsets, pool, version, tool calls and drift; nothing for rollout trajectories", () => {
    const base = { gatewayCalls: undefined } as unknown as Trajectory;
    expect(gatewayCallsHtml(base)).toBe("");
    const html = gatewayCallsHtml({
      gatewayCalls: [
        {
          completionId: "chatcmpl-a-0",
          promptEnd: 40,
          end: 52,
          pool: "current",
          policyVersion: 3,
          toolCalls: ["add"],
          drift: false,
        },
        {
          completionId: "chatcmpl-a-1",
          promptEnd: 60,
          end: 65,
          pool: "stale",
          policyVersion: -1,
          toolCalls: [],
          drift: true,
        },
      ],
    } as unknown as Trajectory);
    expect(html).toContain('id="gateway-calls"');
    expect(html).toContain('<td>40</td><td>12</td><td class="l">current</td><td>v3</td><td class="l">add</td>');
    expect(html).toContain("drift: new segment");
    expect(html.match(/<tr>/g)).toHaveLength(3);
  });
});
