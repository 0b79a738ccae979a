/**
 * bench:pipeline's two workloads as `agentrl plan` scenarios at this machine's scale: the same
 * config fields the bench sets (bench/pipeline.ts), the feeder's window and the trainer's first
 * step computed by the roles' own functions, and the latency task's own delays for the same
 * instances the feeder sends (TaskMixPlan with the bench's seed), so the simulator meets the
 * workload the bench measured rather than a fresh draw of it. The validation test
 * (test/plan/validation.test.ts) and `npm run calibrate` run these.
 */

import { type LatencyOptions, latencyDelayMs } from "../env-images/latency/index.ts";
import { inFlightGroupCap, plannedTasks } from "../functions/feeder/feeder.ts";
import { TaskMixPlan } from "../functions/feeder/plan.ts";
import { parseConfig } from "../shared/config/index.ts";
import type { Scenario } from "../shared/plan/scenario.ts";
import { groupsNeeded } from "../trainer-image/trainer/buffer.ts";

export type BenchWorkload = "default" | "longtail";

/** bench/pipeline.ts WORKLOADS, with its fixed group size 4, window 2 batches and seed 7. */
const WORKLOADS: Record<BenchWorkload, { latency: LatencyOptions; batch: number; calibrationTask: string }> = {
  default: {
    latency: { medianMs: 400, sigma: 1, maxMs: 15_000, probesPerEpisode: 1 },
    batch: 2,
    calibrationTask: "latency-default",
  },
  longtail: {
    latency: { medianMs: 2000, sigma: 1.5, maxMs: 60_000, probesPerEpisode: 1 },
    batch: 8,
    calibrationTask: "latency-longtail",
  },
};
const GROUP_SIZE = 4;
const WINDOW_BATCHES = 2;
const SEED = 7;
const STEPS = 10;
/** The bench measures from the end of step 2 to the last step. */
const WARMUP_STEPS = 2;

export function benchScenario(workload: BenchWorkload, mode: "async" | "sync"): Scenario {
  const w = WORKLOADS[workload];
  const config = parseConfig({
    experimentId: "plan-bench-pipeline",
    seed: SEED,
    tasks: { mix: [{ name: "latency" }] },
    rollout: { groupSize: GROUP_SIZE, workers: 1, maxInFlightBatches: WINDOW_BATCHES, crossPolicy: { enabled: false } },
    trainer: { mode, batchSize: w.batch, maxSteps: STEPS, warmupFactor: 1, checkpointEvery: 1 },
  });
  // the bench sizes rollout slots and env sessions to the async window, so the window is what binds
  const window = inFlightGroupCap(config);
  const slots = window * GROUP_SIZE;
  const plan = new TaskMixPlan(
    plannedTasks(config, () => ({ start: 0, end: 10_000 })),
    config.seed,
  );
  const indices: number[] = [];
  return {
    mode,
    groupSize: GROUP_SIZE,
    batchGroups: w.batch,
    windowGroups: window,
    firstStepGroups: groupsNeeded(w.batch, mode === "sync" ? 1 : config.trainer.warmupFactor, true),
    maxStaleness: config.trainer.maxStaleness,
    checkpointEvery: 1,
    rolloutSlots: slots,
    rolloutWorkers: 1,
    controllers: 1,
    tasks: [
      {
        name: "latency",
        weight: 1,
        envWorkers: 1,
        sessionsPerWorker: slots,
        exclusive: false,
        cost: w.calibrationTask,
      },
    ],
    policyServers: 1,
    trainerDevices: 1,
    decode: "tiny-cpu",
    trainer: "tiny-cpu",
    seed: SEED,
    steps: STEPS,
    warmupSteps: WARMUP_STEPS,
    delayMs: (_task, group, action) => {
      while (indices.length <= group) indices.push(plan.next().index);
      return latencyDelayMs(w.latency, indices[group] as number, action);
    },
  };
}
