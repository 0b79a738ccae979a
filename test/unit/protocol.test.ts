import { describe, expect, it } from "vitest";
import { parseJsonOrThrow, parseOrThrow, ValidationError } from "../../shared/errors.ts";
import {
  ChatCompletionRequest,
  PolicyPublished,
  RolloutRequest,
  Trajectory,
  TrajectoryReady,
} from "../../shared/protocol/index.ts";

function failingPaths(fn: () => unknown): string[] {
  try {
    fn();
  } catch (error) {
    if (error instanceof ValidationError) return error.issues.map((i) => i.path);
    throw error;
  }
  throw new Error("expected a ValidationError");
}

const request = {
  schemaVersion: 1,
  experimentId: "exp",
  task: "db",
  index: 3,
  groupId: "exp-db-3-r0",
  sample: 1,
  groupSize: 8,
};

const trajectory = {
  schemaVersion: 1,
  trajectoryId: "t1",
  experimentId: "exp",
  groupId: "g1",
  task: "db",
  index: 3,
  sample: 0,
  groupSize: 8,
  messages: [{ role: "user", content: "hi" }],
  tools: [],
  tokenIds: [1, 2, 3],
  lossMask: [0, 1, 1],
  logprobs: [0, -0.5, -0.1],
  policyVersion: [-1, 4, 4],
  policyPool: [null, "current", "current"],
  reward: 1,
  envReward: 1,
  status: "completed",
  turns: 1,
  timings: { startedAt: "2026-01-01T00:00:00Z", finishedAt: "2026-01-01T00:00:01Z", envMs: 3, policyMs: 9 },
};

describe("message contracts", () => {
  it("accept valid messages and fill defaults", () => {
    expect(parseOrThrow(RolloutRequest, request, "RolloutRequest")).toMatchObject({ attempt: 0, split: "train" });
    expect(parseOrThrow(Trajectory, trajectory, "Trajectory").metrics).toEqual({});
  });

  it("reject a missing or mistyped field with its path", () => {
    const { groupId: _omit, ...noGroup } = request;
    expect(failingPaths(() => parseOrThrow(RolloutRequest, noGroup, "RolloutRequest"))).toEqual(["groupId"]);
    expect(failingPaths(() => parseOrThrow(RolloutRequest, { ...request, index: -1 }, "RolloutRequest"))).toEqual([
      "index",
    ]);
  });

  it("reject a newer schemaVersion instead of misreading it", () => {
    const ready = {
      schemaVersion: 2,
      trajectoryId: "t",
      experimentId: "e",
      groupId: "g",
      groupSize: 2,
      task: "kg",
      key: "k",
      tokens: 1,
      reward: 0,
      status: "completed",
      minVersion: 0,
      maxVersion: 0,
    };
    expect(failingPaths(() => parseOrThrow(TrajectoryReady, ready, "TrajectoryReady"))).toEqual(["schemaVersion"]);
    expect(
      failingPaths(() => parseOrThrow(PolicyPublished, { schemaVersion: 1, experimentId: "e" }, "PolicyPublished")),
    ).toEqual(["version", "key", "step", "createdAt"]);
  });

  it("reject token arrays whose lengths disagree, naming the array", () => {
    const torn = { ...trajectory, logprobs: [0, -0.5] };
    expect(failingPaths(() => parseOrThrow(Trajectory, torn, "Trajectory"))).toEqual(["logprobs"]);
  });

  it("reject bad nested chat messages with the full path", () => {
    const body = {
      messages: [
        { role: "user", content: "a" },
        { role: "assistant", tool_calls: [{ id: "x" }] },
      ],
    };
    const paths = failingPaths(() => parseOrThrow(ChatCompletionRequest, body, "request"));
    expect(paths).toContain("messages[1].tool_calls[0].type");
    expect(paths).toContain("messages[1].tool_calls[0].function");
  });

  it("turn malformed JSON into a ValidationError, not a SyntaxError", () => {
    expect(() => parseJsonOrThrow(RolloutRequest, "{not json", "RolloutRequest")).toThrow(
      /invalid RolloutRequest: \(root\): not valid JSON/,
    );
  });
});
