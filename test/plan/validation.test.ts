import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { asyncRateBound } from "../../bench/pipelineBound.ts";
import { type BenchWorkload, benchScenario } from "../../bench/pipelinePlan.ts";
import { DEFAULT_CALIBRATION } from "../../cli/commands/plan.ts";
import { parseCalibration } from "../../shared/plan/calibration.ts";
import { runScenario } from "../../shared/plan/scenario.ts";

/**
 * The simulator at this machine's scale against bench:pipeline's measured rates (the fixture,
 * with the command, machine and load that made them): within 15% of the median of three runs for
 * async and sync, default and long-tail, and never above the Little's-law bound of
 * bench/pipelineBound.ts computed from the simulated run's own times. Deterministic: the
 * simulation is seeded and times nothing.
 */
const Measured = z.object({
  runs: z.record(z.enum(["default", "longtail"]), z.object({ async: z.array(z.number()), sync: z.array(z.number()) })),
});
const measured = Measured.parse(
  JSON.parse(readFileSync(new URL("../fixtures/bench-pipeline-measured.json", import.meta.url), "utf8")),
);
const calibration = parseCalibration(JSON.parse(readFileSync(DEFAULT_CALIBRATION, "utf8")), DEFAULT_CALIBRATION);

function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
}

const TOLERANCE = 0.15;

describe("the simulator predicts bench:pipeline (calibration/calibration.json)", () => {
  for (const workload of ["default", "longtail"] as const satisfies readonly BenchWorkload[])
    for (const mode of ["async", "sync"] as const)
      it(`${workload} ${mode}: within 15% of the measured median`, () => {
        const want = median(measured.runs[workload]?.[mode] ?? []);
        const { result } = runScenario(benchScenario(workload, mode), calibration);
        expect(result.truncated).toBe(false);
        const error = result.trajectoriesPerS / want - 1;
        expect(
          Math.abs(error),
          `simulated ${result.trajectoriesPerS.toFixed(2)}/s, measured ${want}/s`,
        ).toBeLessThanOrEqual(TOLERANCE);
      });

  for (const workload of ["default", "longtail"] as const)
    it(`${workload} async: never above the Little's-law bound`, () => {
      const scenario = benchScenario(workload, "async");
      const { result } = runScenario(scenario, calibration);
      const bound = asyncRateBound(
        {
          groupSize: scenario.groupSize,
          batchGroups: scenario.batchGroups,
          windowEpisodes: scenario.windowGroups * scenario.groupSize,
          slots: scenario.rolloutSlots,
        },
        {
          episodeSeconds: [result.meanEpisodeSeconds],
          groupSeconds: [result.meanGroupSeconds],
          steps: [{ seconds: result.meanHoldSeconds, trajectories: 1 }],
          windowSeconds: result.windowSeconds,
        },
      );
      expect(result.trajectoriesPerS).toBeGreaterThan(0);
      expect(result.trajectoriesPerS).toBeLessThanOrEqual(bound.rate);
      // the window binds, as the bench reports ("what binds: window")
      expect(bound.limitedBy).toBe("window");
    });
});
