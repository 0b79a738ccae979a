import { describe, expect, it } from "vitest";
import { runScripted } from "../../shared/env/session.ts";
import { loadTaskModule } from "../registry.ts";
import {
  createLatencyTask,
  LatencyOptions,
  latencyDelayMs,
  latencyExpert,
  latencyOptionsFromEnv,
  latencyRandom,
} from "./index.ts";

const fast = LatencyOptions.parse({ medianMs: 2, sigma: 1, maxMs: 20, probesPerEpisode: 2 });

describe("latency task", () => {
  it("draws seeded, long-tailed, capped delays", () => {
    const options = LatencyOptions.parse({ medianMs: 100, sigma: 1, maxMs: 5_000 });
    const delays = Array.from({ length: 2_000 }, (_, i) => latencyDelayMs(options, i, 1));
    expect(latencyDelayMs(options, 7, 1)).toBe(latencyDelayMs(options, 7, 1));
    expect(latencyDelayMs(options, 7, 1)).not.toBe(latencyDelayMs(options, 7, 2));
    const sorted = [...delays].sort((a, b) => a - b);
    const median = sorted[1_000] as number;
    const p99 = sorted[1_980] as number;
    expect(median).toBeGreaterThan(80);
    expect(median).toBeLessThan(125);
    // lognormal sigma 1: p99 is about e^2.33 ~ 10x the median
    expect(p99 / median).toBeGreaterThan(6);
    expect(Math.max(...delays)).toBeLessThanOrEqual(5_000);
  });

  it("expert completes with reward 1 after the configured probes; random scores about half", async () => {
    const task = createLatencyTask(fast);
    const expert = await runScripted(task, 3, latencyExpert);
    expect(expert).toMatchObject({ status: "completed", reward: 1, turns: 2 });
    const random = await Promise.all(Array.from({ length: 40 }, (_, i) => runScripted(task, i, latencyRandom)));
    expect(random.every((r) => r.status === "completed" && r.turns === 2)).toBe(true);
    const wins = random.filter((r) => r.reward === 1).length;
    expect(wins).toBeGreaterThan(8);
    expect(wins).toBeLessThan(32);
  });

  it("stops sleeping when the episode is cancelled", async () => {
    const task = createLatencyTask(LatencyOptions.parse({ medianMs: 60_000, sigma: 0, maxMs: 60_000 }));
    const abort = new AbortController();
    const started = Date.now();
    const pending = task.start(0, abort.signal);
    setTimeout(() => abort.abort(new Error("cancelled")), 20);
    await expect(pending).rejects.toThrow("cancelled");
    expect(Date.now() - started).toBeLessThan(5_000);
  });

  it("reads its options from AGENTRL_LATENCY_* and names a bad variable", async () => {
    expect(latencyOptionsFromEnv({ AGENTRL_LATENCY_MEDIAN_MS: "50", AGENTRL_LATENCY_PROBES: "3" })).toMatchObject({
      medianMs: 50,
      probesPerEpisode: 3,
      sigma: 1,
    });
    expect(() => latencyOptionsFromEnv({ AGENTRL_LATENCY_SIGMA: "x" })).toThrow("AGENTRL_LATENCY_SIGMA");
    expect(() => latencyOptionsFromEnv({ AGENTRL_LATENCY_PROBES: "0" })).toThrow("AGENTRL_LATENCY_PROBES");
    const registered = await loadTaskModule("latency");
    expect(registered.task.name).toBe("latency");
  });
});
