import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { median, spread, summarizeRuns } from "../../bench/repeat.ts";
import { runProcess } from "../support/cli.ts";

const REPEAT = fileURLToPath(new URL("../../bench/repeat.ts", import.meta.url));

describe("bench:repeat", () => {
  it("median and spread", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 2, 3])).toBe(2.5);
    expect(spread([90, 100, 110])).toBeCloseTo(0.2, 10);
    expect(spread([5, 5])).toBe(0);
    expect(spread([-1, 0, 1])).toBeNull();
  });

  it("summarizes the numeric figures every run has, leaving out the load and nulls", () => {
    const rows = summarizeRuns([
      { a: 10, b: null, loadAverage: 1.2, label: "x" },
      { a: 12, b: 3, loadAverage: 0.4, label: "x" },
    ]);
    expect(rows).toEqual([{ key: "a", values: [10, 12], median: 11, spread: 2 / 11 }]);
  });

  it("runs a bench twice and ends with the spread of its figures", async () => {
    const run = await runProcess(
      process.execPath,
      [
        "--import",
        "tsx",
        REPEAT,
        "transport",
        "--runs",
        "2",
        "--",
        "--local-only",
        "--messages",
        "20",
        "--objects",
        "3",
        "--phase-ms",
        "500",
      ],
      { timeoutMs: 90_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stderr).toMatch(/bench:transport run 2\/2 \(load average [\d.]+\)/);
    const last = JSON.parse(run.stdout.trimEnd().split("\n").at(-1) ?? "") as {
      bench: string;
      runs: number;
      load1: number[];
      median: Record<string, number>;
      spread: Record<string, number | null>;
    };
    expect(last.bench).toBe("transport");
    expect(last.runs).toBe(2);
    expect(last.load1).toHaveLength(2);
    expect(last.median.localMsgPerS).toBeGreaterThan(0);
    expect(last.spread.localMsgPerS).toBeGreaterThanOrEqual(0);
    // moto was skipped: its null figures are not summarised
    expect(last.median).not.toHaveProperty("motoMsgPerS");
    expect(run.stdout).toMatch(/localMsgPerS +[\d.]+ +[\d.]+% +[\d.]+, [\d.]+/);
  }, 100_000);

  it("refuses an unknown bench, naming the allowed ones", async () => {
    const run = await runProcess(process.execPath, ["--import", "tsx", REPEAT, "nope"], { timeoutMs: 30_000 });
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/unknown bench "nope"; allowed: policy, controller, pipeline, transport, train/);
  });
});
