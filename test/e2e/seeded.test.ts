import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import { runPipeline } from "../../cli/launch/pipeline.ts";
import { readMetrics } from "../../cli/report/report.ts";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { processIdsNaming } from "../support/processes.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * Sync mode is the seeded mode whose result does not depend on timing or load: each batch is fed
 * for one published version and the policy servers answer with their pool's version for it
 * (waiting for it to load), the trainer sums its batch in a fixed order, and an episode retried
 * after an infrastructure failure replays its first attempt's draws. Two runs with the same seed
 * therefore write the same bytes for every version, even when one of them loses its env workers.
 */

const STEPS = 2;
/** The quickstart's warm-up: its groups hold different rewards, so every step changes the weights. */
const BASE = "trainer-image/base-policy";

function seededConfig(experimentId: string): ExperimentConfig {
  return parseConfig({
    experimentId,
    seed: 1,
    policy: {
      model: { vocabSize: 1024, dModel: 64, layers: 2, heads: 4, kvHeads: 2, ffnHidden: 192, contextLength: 2048 },
    },
    tasks: {
      mix: [
        { name: "db", concurrency: 8 },
        { name: "os", concurrency: 8 },
      ],
    },
    rollout: {
      groupSize: 4,
      maxTurns: 8,
      maxTokensPerTurn: 64,
      temperature: 0.8,
      workers: 1,
      concurrency: 16,
      // The stale pool serves v0 for both steps and acts on a third of the turns: both pools are pinned.
      crossPolicy: { enabled: true, staleProbability: 0.34, staleEvery: 2 },
    },
    trainer: { mode: "sync", batchSize: 3, maxSteps: STEPS, warmupFactor: 1, maxStaleness: 2 },
    evaluation: { instances: 0 },
  });
}

/** Trajectory files stored so far in a run's local store. */
function storedTrajectories(runDir: string): number {
  const root = join(runDir, "transport", "objects", "trajectories", "trajectories");
  if (!existsSync(root)) return 0;
  return readdirSync(root, { recursive: true }).filter((name) => String(name).endsWith(".json")).length;
}

/**
 * SIGKILLs the run's env workers once its first trajectory is stored, while the rest of step 1's
 * episodes are in flight: their sessions are lost, the rollout worker retries them on the
 * workers the pools start in their place. Returns how many workers it killed.
 */
async function killEnvWorkersMidStep(runDir: string, done: Promise<unknown>): Promise<number> {
  let finished = false;
  void done.finally(() => {
    finished = true;
  });
  while (!finished && storedTrajectories(runDir) === 0) await sleep(50);
  const workers = processIdsNaming("env serve", runDir);
  for (const pid of workers) process.kill(pid, "SIGKILL");
  return workers.length;
}

async function run(
  name: string,
  { killEnvWorkers = false } = {},
): Promise<{ weights: string[]; metrics: Record<string, number>[]; retries: number }> {
  const runDir = tempDir(`agentrl-seeded-${name}-`);
  const running = runPipeline({ config: seededConfig(`seeded-${name}`), runDir, baseCheckpoint: BASE });
  const killed = killEnvWorkers ? killEnvWorkersMidStep(runDir, running) : Promise.resolve(0);
  const result = await running;
  if (killEnvWorkers) expect(await killed).toBeGreaterThan(0);
  expect(result.steps).toBe(STEPS);
  const retries =
    readFileSync(join(runDir, "logs", "rollout-0.log"), "utf8").split(
      "infrastructure failure; retrying with a fresh session",
    ).length - 1;
  // The run tidied its stores: no temp folder beside them.
  expect(readdirSync(join(runDir, "transport", "objects")).sort()).toEqual(["checkpoints", "trajectories"]);
  const objects = join(runDir, "transport", "objects", "checkpoints", "policies");
  const weights = Array.from({ length: STEPS + 1 }, (_, v) =>
    createHash("sha256")
      .update(readFileSync(join(objects, `v${v}`, "weights.safetensors")))
      .digest("hex"),
  );
  const records = await readMetrics(join(runDir, "metrics.jsonl"));
  // Wall-clock figures differ between runs; everything learned or counted must not.
  const metrics = records.map((r) =>
    Object.fromEntries(Object.entries(r.metrics).filter(([key]) => !/^(time|throughput)\//.test(key))),
  );
  return { weights, metrics, retries };
}

describe("sync mode with a seed", () => {
  it("gives the same weights and metrics twice, whatever the timing, and when load makes it retry episodes", async () => {
    const first = await run("a");
    // The second run loses its env workers mid-step: the episodes it retries replay their draws.
    const second = await run("b", { killEnvWorkers: true });
    expect(first.retries).toBe(0);
    expect(second.retries).toBeGreaterThan(0);
    expect(new Set(first.weights).size).toBe(STEPS + 1); // every step changed the weights
    expect(second.weights).toEqual(first.weights);
    expect(second.metrics).toEqual(first.metrics);
    // The stale pool acted at step 2 with v0 (staleness 1): its pinning was exercised too.
    const staleTokens = first.metrics.reduce((sum, m) => sum + (m["staleness/1"] ?? 0), 0);
    expect(staleTokens).toBeGreaterThan(0);
  }, 300_000);
});
