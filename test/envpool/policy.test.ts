import { describe, expect, it } from "vitest";
import { desiredWorkers, percentile, taskShare } from "../../functions/envpool/policy.ts";
import { parseConfig } from "../../shared/config/index.ts";

const sizing = { slotsPerWorker: 4, minWorkers: 1, maxWorkers: 5, warmWorkers: 0 };

describe("env pool sizing", () => {
  it("covers sessions in use, queued demand and 406 answers, plus the warm pool, within min and max", () => {
    expect(desiredWorkers({ inUse: 0, pending: 0, rejected: 0 }, sizing)).toBe(1);
    expect(desiredWorkers({ inUse: 5, pending: 0, rejected: 0 }, sizing)).toBe(2);
    expect(desiredWorkers({ inUse: 4, pending: 3, rejected: 2 }, sizing)).toBe(3);
    expect(desiredWorkers({ inUse: 4, pending: 0, rejected: 0 }, { ...sizing, warmWorkers: 2 })).toBe(3);
    expect(desiredWorkers({ inUse: 100, pending: 0, rejected: 0 }, sizing)).toBe(5);
    // Exclusive: one slot per worker.
    expect(
      desiredWorkers({ inUse: 3, pending: 0, rejected: 1 }, { ...sizing, slotsPerWorker: 1, warmWorkers: 1 }),
    ).toBe(5);
  });

  it("counts queued requests only as far as the rollout workers can start them", () => {
    // 2 rollout slots of this task's share in use, 6 free: 20 queued requests want 6 more sessions, not 20.
    expect(desiredWorkers({ inUse: 2, pending: 20, rejected: 0, startable: 8 }, sizing)).toBe(2);
    expect(desiredWorkers({ inUse: 2, pending: 20, rejected: 0 }, sizing)).toBe(5); // uncapped: every queued request
    // Fewer queued than startable: each counts.
    expect(desiredWorkers({ inUse: 2, pending: 3, rejected: 0, startable: 8 }, sizing)).toBe(2);
    expect(desiredWorkers({ inUse: 0, pending: 5, rejected: 0, startable: 8 }, sizing)).toBe(2);
    // Sessions in use beyond the share (long episodes) are real: they keep their workers; 406 answers still add.
    expect(desiredWorkers({ inUse: 10, pending: 20, rejected: 0, startable: 8 }, sizing)).toBe(3);
    expect(desiredWorkers({ inUse: 10, pending: 20, rejected: 3, startable: 8 }, sizing)).toBe(4);
    // No rollout worker takes the queue (a gateway-only run): queued requests want nothing.
    expect(desiredWorkers({ inUse: 0, pending: 20, rejected: 0, startable: 0 }, sizing)).toBe(1);
  });

  it("counts this task's weight share of the queued rollout requests, rounded up", () => {
    expect(taskShare(10, 1, 2)).toBe(5);
    expect(taskShare(3, 1, 4)).toBe(1);
    expect(taskShare(0, 1, 2)).toBe(0);
    expect(taskShare(10, 1, 0)).toBe(0);
  });

  it("takes nearest-rank percentiles", () => {
    expect(percentile([], 50)).toBeUndefined();
    expect(percentile([5, 1, 3], 50)).toBe(3);
    expect(percentile([1, 2, 3, 4, 100], 99)).toBe(100);
  });

  it("rejects pool fields that contradict each other, naming the field", () => {
    expect(() => parseConfig({ tasks: { mix: [{ name: "os", minWorkers: 3, maxWorkers: 2 }] } })).toThrow(
      "tasks.mix[0].minWorkers: 3 exceeds maxWorkers (2)",
    );
    expect(() => parseConfig({ tasks: { mix: [{ name: "os", warmWorkers: 5, maxWorkers: 2 }] } })).toThrow(
      "tasks.mix[0].warmWorkers",
    );
    const entry = parseConfig({ tasks: { mix: [{ name: "os", exclusive: true, maxEpisodes: 1 }] } }).tasks.mix[0];
    expect(entry).toMatchObject({ minWorkers: 1, maxWorkers: 4, warmWorkers: 0, exclusive: true, maxEpisodes: 1 });
  });
});
