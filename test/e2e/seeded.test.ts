import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runPipeline } from "../../cli/launch/pipeline.ts";
import { readMetrics } from "../../cli/report/report.ts";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * Sync mode is the seeded mode whose result does not depend on timing or load: each batch is fed
 * for one published version and the policy servers answer with their pool's version for it
 * (waiting for it to load), and the trainer sums its batch in a fixed order. Two runs with the
 * same seed therefore write the same bytes for every version.
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
    trainer: { mode: "sync", batchSize: 5, maxSteps: STEPS, warmupFactor: 1, maxStaleness: 2 },
    evaluation: { instances: 0 },
  });
}

async function run(name: string): Promise<{ weights: string[]; metrics: Record<string, number>[] }> {
  const runDir = tempDir(`agentrl-seeded-${name}-`);
  const result = await runPipeline({ config: seededConfig(`seeded-${name}`), runDir, baseCheckpoint: BASE });
  expect(result.steps).toBe(STEPS);
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
  return { weights, metrics };
}

describe("sync mode with a seed", () => {
  it("gives the same weights and metrics twice, whatever the timing", async () => {
    const first = await run("a");
    const second = await run("b");
    expect(new Set(first.weights).size).toBe(STEPS + 1); // every step changed the weights
    expect(second.weights).toEqual(first.weights);
    expect(second.metrics).toEqual(first.metrics);
    // The stale pool acted at step 2 with v0 (staleness 1): its pinning was exercised too.
    const staleTokens = first.metrics.reduce((sum, m) => sum + (m["staleness/1"] ?? 0), 0);
    expect(staleTokens).toBeGreaterThan(0);
  }, 300_000);
});
