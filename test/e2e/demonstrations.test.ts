import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runPipeline } from "../../cli/launch/pipeline.ts";
import { readMetrics } from "../../cli/report/report.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { logRecords } from "../support/pipelineRun.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * `trainer.demonstrations` through the whole pipeline: the `agentrl trainer` child collects the
 * mix's expert episodes itself, and every step imitates some of them beside the policy term.
 */

const STEPS = 2;

describe("a run with expert demonstrations in the loss", () => {
  it("the trainer collects each task's expert episodes and every step reports their imitation loss", async () => {
    const runDir = tempDir("agentrl-demonstrations-");
    const config = parseConfig({
      experimentId: "demonstrations",
      seed: 3,
      policy: {
        model: { vocabSize: 1024, dModel: 64, layers: 2, heads: 4, kvHeads: 2, ffnHidden: 192, contextLength: 2048 },
      },
      tasks: {
        mix: [
          { name: "db", concurrency: 4 },
          { name: "os", concurrency: 4 },
        ],
      },
      rollout: { groupSize: 2, maxTurns: 4, maxTokensPerTurn: 48, workers: 1, concurrency: 8 },
      trainer: {
        mode: "sync",
        batchSize: 2,
        maxSteps: STEPS,
        warmupFactor: 1,
        demonstrations: { coef: 0.5, perStep: 3, episodesPerTask: 6 },
      },
      evaluation: { instances: 0 },
    });
    const result = await runPipeline({ config, runDir, baseCheckpoint: "trainer-image/base-policy" });
    expect(result.steps).toBe(STEPS);
    const started = logRecords(runDir, "trainer").find((r) => r.event === "started");
    const episodes = started?.demonstrations as Record<string, { episodes: number; kept: number }> | undefined;
    expect(Object.keys(episodes ?? {}).sort()).toEqual(["db", "os"]);
    for (const { episodes: tried, kept } of Object.values(episodes ?? {})) {
      expect(tried).toBe(6);
      expect(kept).toBeGreaterThan(0);
    }
    const records = await readMetrics(join(runDir, "metrics.jsonl"));
    expect(records).toHaveLength(STEPS);
    for (const { metrics } of records) {
      // a warm-up that imitated these experts already: well below the uniform ln 1024 = 6.9
      expect(metrics["loss/demonstration"]).toBeGreaterThan(0);
      expect(metrics["loss/demonstration"]).toBeLessThan(3);
      expect(metrics["demonstrations/tokens"]).toBeGreaterThan(0);
    }
  }, 300_000);
});
