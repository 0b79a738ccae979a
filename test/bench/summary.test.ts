import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { figure, PolicySummary, parseSummary, TrainSummary, TransportSummary } from "../../bench/summary.ts";
import { DATA_PARALLEL_NODE_FLAGS } from "../../shared/model/dataParallelFlags.ts";
import { runProcess } from "../support/cli.ts";

const TRANSPORT_BENCH = fileURLToPath(new URL("../../bench/transport.ts", import.meta.url));
const POLICY_BENCH = fileURLToPath(new URL("../../bench/policy.ts", import.meta.url));
const TRAIN_BENCH = fileURLToPath(new URL("../../bench/train.ts", import.meta.url));

describe("bench summary line", () => {
  it("bench:transport ends with its JSON summary (tiny local-only run)", async () => {
    const args = ["--import", "tsx", TRANSPORT_BENCH, "--local-only", "--messages", "40", "--objects", "5"];
    const run = await runProcess(process.execPath, [...args, "--phase-ms", "2000", "--idle-ms", "1500"], {
      timeoutMs: 60_000,
    });
    expect(run.status, run.stderr).toBe(0);
    const summary = parseSummary(TransportSummary, run.stdout);
    // 40 one-at-a-time cycles and 40 batched ones ran, so both rates are measured and positive
    expect(summary.localMsgPerS).toBeGreaterThan(0);
    expect(summary.localBatchedMsgPerS).toBeGreaterThan(0);
    expect(summary.localMsgPerCpuS).toBeGreaterThan(0);
    expect(summary.localBatchedMsgPerCpuS).toBeGreaterThan(0);
    expect(summary.localPutP50Ms).toBeGreaterThan(0);
    // another process received the wake phase's messages, and idled before them
    expect(summary.localWakeP50Ms).toBeGreaterThan(0);
    expect(summary.localIdleConsumerCpuPercent).toBeGreaterThanOrEqual(0);
    expect(summary.motoMsgPerS).toBeNull();
    expect(summary.motoWakeP50Ms).toBeNull();
    // the table comes first: the summary is the last line only
    expect(run.stdout).toMatch(/send\+receive\+delete, 1 at a time \(msg\/s\) +\| \d+ \(n=40\)/);
    expect(run.stdout).toMatch(/send to other process's receive, p50\/p90 \(ms\) +\| [\d.]+ \/ [\d.]+ \(n=30\)/);
  });

  it("bench:policy ends with its JSON summary (short measurements, the tests' small model)", async () => {
    const run = await runProcess(process.execPath, ["--import", "tsx", POLICY_BENCH, "--model", "small"], {
      timeoutMs: 120_000,
      env: { BENCH_SECONDS: "0.2", AGENTRL_BACKEND: "wasm" },
    });
    expect(run.status, run.stderr).toBe(0);
    const summary = parseSummary(PolicySummary, run.stdout);
    expect(summary.decodeSpeedup64).toBeGreaterThan(0);
    expect(summary.workerTokPerS64).toBeGreaterThan(0);
    expect(summary.trainMatmulFraction).toBeGreaterThan(0);
    expect(run.stdout).toMatch(/decode tokens\/s/);
  }, 150_000);

  it("bench:train ends with its JSON summary (one timed step per side)", async () => {
    const args = ["--import", "tsx", TRAIN_BENCH, "--steps", "1", "--warmup", "0", "--model", "small"];
    // as `npm run bench:train` runs it
    const run = await runProcess(process.execPath, [...DATA_PARALLEL_NODE_FLAGS, ...args], {
      timeoutMs: 120_000,
      env: { AGENTRL_BACKEND: "wasm" },
    });
    expect(run.status, run.stderr).toBe(0);
    const summary = parseSummary(TrainSummary, run.stdout);
    expect(summary.trainTokPerS1Thread).toBeGreaterThan(0);
    expect(summary.trainTokPerS2Threads).toBeGreaterThan(0);
    expect(summary.dataParallelSpeedup).toBeCloseTo(
      (summary.trainTokPerS2Threads as number) / (summary.trainTokPerS1Thread as number),
      1,
    );
    // the two runs trained the same weights, up to float rounding
    const drift = Number(/largest \|weight difference\| after the run: ([\d.e+-]+)/.exec(run.stdout)?.[1]);
    expect(drift).toBeLessThan(1e-4);
    expect(run.stdout).toMatch(/2 threads \(data parallel\)/);
    expect(run.stdout).toContain(`node flags: ${DATA_PARALLEL_NODE_FLAGS.join(" ")}`);
  }, 150_000);

  it("a last line that is not JSON, or lacks a key, is refused", () => {
    expect(() => parseSummary(TransportSummary, "table\ntotal 3 s\n")).toThrow(/not JSON: "total 3 s"/);
    expect(() => parseSummary(TransportSummary, '{"localMsgPerS": 1}')).toThrow(/localBatchedMsgPerS/);
  });

  it("figures are rounded, and what is not finite becomes null", () => {
    expect(figure(1.23456)).toBe(1.235);
    expect(figure(Number.NaN)).toBeNull();
    expect(figure(undefined)).toBeNull();
  });
});
