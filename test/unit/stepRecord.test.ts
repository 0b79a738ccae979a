import { describe, expect, it } from "vitest";
import { parseConfig } from "../../shared/config/index.ts";
import { StepRecord } from "../../shared/protocol/stepRecord.ts";
import { prepareBatch } from "../../trainer-image/trainer/batch.ts";
import type { BufferedGroup } from "../../trainer-image/trainer/buffer.ts";
import { buildStepRecord, StepRecorder, spansOf } from "../../trainer-image/trainer/stepRecord.ts";
import { fakeTrajectory } from "../roles/trainerHelpers.ts";

const params = { clipLow: 0.2, clipHigh: 0.2, dualClip: 3, klCoef: 0 };
const losses = { total: 0, policy: 0, kl: 0, clipFrac: 0, gradNorm: 0, skipped: 0 };

function group(groupId: string, ids: string[]): BufferedGroup {
  const member = (trajectoryId: string) => ({
    ready: {
      schemaVersion: 1 as const,
      trajectoryId,
      experimentId: "e",
      groupId,
      groupSize: ids.length,
      task: "db",
      key: `trajectories/e/${groupId}/${trajectoryId}.json`,
      tokens: 14,
      reward: 0,
      status: "completed" as const,
      minVersion: 5,
      maxVersion: 5,
    },
    receiptHandle: trajectoryId,
    olderReceipts: [],
  });
  return {
    groupId,
    groupSize: ids.length,
    firstSeen: 0,
    members: new Map(ids.map((id) => [id, member(id)])),
    dropped: new Map(),
  };
}

describe("step record builder", () => {
  it("packs trained positions as spans", () => {
    expect(spansOf([0, 1, 1, 0, 0, 1, 0, 1, 1])).toEqual([
      [1, 3],
      [5, 6],
      [7, 9],
    ]);
  });

  it("says why a trajectory added nothing: uniform group, all tokens stale, unloaded, abandoned", () => {
    const trainer = {
      ...parseConfig({}).trainer,
      skipUniformGroups: true,
      maxStaleness: 1,
      stalePolicy: "drop" as const,
    };
    const trajectories = [
      fakeTrajectory("e", "mixed", 0, 1, { tokenVersion: 5 }),
      fakeTrajectory("e", "mixed", 1, 0, { tokenVersion: 2 }), // staleness 3 > 1: every token dropped
      fakeTrajectory("e", "same", 0, 1, { tokenVersion: 5 }),
      fakeTrajectory("e", "same", 1, 1, { tokenVersion: 5 }),
    ];
    const batch = prepareBatch(trajectories, 5, trainer, 64);
    const record = buildStepRecord({
      experimentId: "e",
      step: 3,
      trainedVersion: 5,
      trainer,
      params,
      trajectories,
      contextLength: 64,
      batch,
      rowInputs: batch.rows.map((r) => ({ oldLogp: r.oldLogp })),
      groups: [group("mixed", ["mixed-s0", "mixed-s1", "mixed-s2"])],
      abandoned: [group("late", ["late-s0"])],
      losses,
      recorder: new StepRecorder(), // no micro-batch ran: spans stay empty, nothing is invented
    });
    expect(StepRecord.parse(record)).toEqual(record);
    expect(record.trajectories.map((t) => t.dropped)).toEqual([
      undefined,
      "all tokens stale",
      "uniform group skipped",
      "uniform group skipped",
    ]);
    expect(record.trajectories[0]).toMatchObject({ spans: [], newLogp: [], normalizedAdvantage: expect.any(Number) });
    expect(record.unloaded).toEqual([
      { trajectoryId: "mixed-s2", groupId: "mixed", dropped: "missing or invalid" },
      { trajectoryId: "late-s0", groupId: "late", dropped: "group abandoned" },
    ]);
  });
});
