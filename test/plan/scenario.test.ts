import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { DEFAULT_CALIBRATION } from "../../cli/commands/plan.ts";
import { type Calibration, parseCalibration } from "../../shared/plan/calibration.ts";
import { runScenario, type Scenario } from "../../shared/plan/scenario.ts";

const calibration = parseCalibration(JSON.parse(readFileSync(DEFAULT_CALIBRATION, "utf8")), DEFAULT_CALIBRATION);

/** A small async scenario on the tiny CPU profiles: one task of the calibration's `db` shape. */
function scenario(overrides: Partial<Scenario> = {}): Scenario {
  return {
    mode: "async",
    groupSize: 4,
    batchGroups: 4,
    windowGroups: 8,
    firstStepGroups: 4,
    maxStaleness: 4,
    checkpointEvery: 1,
    rolloutSlots: 32,
    controllers: 1,
    tasks: [{ name: "db", weight: 1, envWorkers: 2, sessionsPerWorker: 16, exclusive: false }],
    policyServers: 1,
    trainerDevices: 1,
    decode: "tiny-cpu",
    trainer: "tiny-cpu",
    seed: 11,
    steps: 12,
    warmupSteps: 3,
    ...overrides,
  };
}

describe("runScenario", () => {
  it("is deterministic for a seed", () => {
    const a = runScenario(scenario(), calibration).result;
    const b = runScenario(scenario(), calibration).result;
    expect(a.trajectoriesPerS).toBe(b.trajectoriesPerS);
    expect(a.events).toBe(b.events);
  });

  it("names the controller when it saturates, and a second controller lifts the rate", () => {
    // a controller of 20 req/s against ~6 requests per db episode
    const slow: Calibration = { ...calibration, controller: { ...calibration.controller, saturationReqPerS: 20 } };
    const wide = scenario({
      windowGroups: 64,
      batchGroups: 16,
      firstStepGroups: 16,
      rolloutSlots: 256,
      tasks: [{ name: "db", weight: 1, envWorkers: 64, sessionsPerWorker: 16, exclusive: false }],
      policyServers: 16,
      trainerDevices: 16,
    });
    const one = runScenario(wide, slow);
    expect(one.bottleneck).toBe("controller");
    const two = runScenario({ ...wide, controllers: 2 }, slow);
    expect(two.result.trajectoriesPerS).toBeGreaterThan(one.result.trajectoriesPerS * 1.5);
  });

  it("caps exclusive tasks at the Fargate launch rate and names that limit", () => {
    const report = runScenario(
      scenario({
        windowGroups: 256,
        batchGroups: 64,
        firstStepGroups: 64,
        rolloutSlots: 1024,
        tasks: [{ name: "db", weight: 1, envWorkers: 1024, sessionsPerWorker: 1, exclusive: true }],
        policyServers: 64,
        trainerDevices: 64,
        steps: 30,
      }),
      calibration,
    );
    const launchRate = calibration.aws.limits.fargateLaunchPerS.value;
    // launches are serialized at the sustained rate; the finite window lets its edge add a few percent
    expect(report.result.trajectoriesPerS).toBeLessThanOrEqual(launchRate * 1.05);
    expect(report.result.trajectoriesPerS).toBeGreaterThan(launchRate * 0.8);
    expect(report.bottleneck).toMatch(/Fargate task launches/);
  });

  it("prices the hour line by line and divides by the rate for 1M trajectories", () => {
    const report = runScenario(scenario(), calibration);
    const { bill, result } = report;
    const sum = bill.lines.reduce((s, l) => s + l.onDemandPerHour, 0);
    expect(bill.onDemandPerHour).toBeCloseTo(sum, 9);
    // $ per 1M = $/h / (trajectories/s * 3600 s/h) * 1e6
    expect(bill.onDemandPer1M).toBeCloseTo((bill.onDemandPerHour / (result.trajectoriesPerS * 3600)) * 1e6, 6);
    expect(bill.spotPerHour).toBeLessThan(bill.onDemandPerHour);
  });

  it("keeps staleness within the window: at most window/batch versions behind", () => {
    const { result } = runScenario(scenario(), calibration);
    // 8 groups outstanding, steps of at least 4: a trajectory waits at most ~2 steps
    expect(result.staleness.length).toBeLessThanOrEqual(3);
    expect(result.staleBeyondBound).toBe(0);
    expect(result.staleness.reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
  });

  it("sync waits for the step barrier and is slower than async on the same workload", () => {
    const asyncRate = runScenario(scenario(), calibration).result.trajectoriesPerS;
    const sync = runScenario(scenario({ mode: "sync" }), calibration);
    expect(sync.result.trajectoriesPerS).toBeLessThan(asyncRate);
    expect(sync.bottleneck).toBe("sync step barrier");
    // a batch is sent once the version is published; a server still serving the previous one
    // until its next poll makes a trajectory one version old, never more
    expect(sync.result.staleness.length).toBeLessThanOrEqual(2);
  });
});
