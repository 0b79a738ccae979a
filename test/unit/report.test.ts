import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { samplingSuffix } from "../../cli/launch/eval.ts";
import { type ChartSpec, chartSpecs } from "../../cli/report/charts.ts";
import {
  evalComparisonMarkdown,
  evalReportMarkdown,
  evalTableMarkdown,
  pairedDifference,
  readMetrics,
  renderReport,
  stalenessHistogram,
  tasksIn,
} from "../../cli/report/report.ts";
import type { EvalReport, StepMetrics } from "../../shared/protocol/metrics.ts";
import { tempDir } from "../support/tmp.ts";

const record = (step: number, metrics: Record<string, number>): StepMetrics => ({
  schemaVersion: 1,
  experimentId: "exp",
  step,
  version: step + 1,
  time: new Date(0).toISOString(),
  elapsedSeconds: step * 10,
  metrics,
});

const evalReport = (policy: string, db: number, kg: number): EvalReport => ({
  schemaVersion: 1,
  policy,
  split: "test",
  createdAt: new Date(0).toISOString(),
  tasks: [
    { task: "db", episodes: 10, success: db, meanReward: db, meanTurns: 3, statuses: { completed: 10 } },
    { task: "kg", episodes: 10, success: kg, meanReward: kg, meanTurns: 4, statuses: { completed: 10 } },
  ],
  averageSuccess: (db + kg) / 2,
});

describe("run report", () => {
  const records = [
    record(0, { "task/db/success": 0.25, "task/kg/success": 0.5, "staleness/0": 100, "staleness/1": 20 }),
    record(1, { "task/db/success": 0.5, "task/kg/success": 0.5, "staleness/0": 80, "staleness/2": 5 }),
  ];

  it("finds tasks and sums the staleness histogram over steps", () => {
    expect(tasksIn(records)).toEqual(["db", "kg"]);
    expect(stalenessHistogram(records)).toEqual([
      [0, 180],
      [1, 20],
      [2, 5],
    ]);
  });

  it("lays the success table out like the reference (percent, avg column)", () => {
    const table = evalTableMarkdown([evalReport("v0 (base)", 0.1, 0.3), evalReport("v5", 0.4, 0.6)]);
    expect(table.split("\n")).toEqual([
      "| policy | db | kg | avg |",
      "|---|---|---|---|",
      "| v0 (base) | 10.0 | 30.0 | 20.0 |",
      "| v5 | 40.0 | 60.0 | 50.0 |",
    ]);
  });

  it("labels a sampled evaluation with its temperature, top-p and samples, a greedy one with nothing", () => {
    expect(samplingSuffix({ temperature: 0, topP: 1, samples: 1 })).toBe("");
    expect(samplingSuffix({ temperature: 1, topP: 1, samples: 1 })).toBe(" T=1");
    expect(samplingSuffix({ temperature: 0.5, topP: 1, samples: 8 })).toBe(" T=0.5 k=8");
    expect(samplingSuffix({ temperature: 1, topP: 0.9, samples: 4 })).toBe(" T=1 p=0.9 k=4");
  });

  it("adds the sampling table (pass@1, pass@k, mixed groups) only to a sampled report", () => {
    const plain = evalReport("v0", 0.1, 0.3);
    expect(evalReportMarkdown([plain])).toBe(evalTableMarkdown([plain]));
    const sampled: EvalReport = {
      ...plain,
      policy: "v0 T=1 k=8",
      tasks: plain.tasks.map((t) => ({ ...t, episodes: 80, samples: 8, passAtK: 0.5, mixedShare: 0.25 })),
    };
    expect(evalReportMarkdown([sampled]).split("\n").slice(-4)).toEqual([
      "| v0 T=1 k=8 | instances | samples | pass@1 | pass@k | mixed groups |",
      "|---|---|---|---|---|---|",
      "| db | 10 | 8 | 10.0 | 50.0 | 25.0 |",
      "| kg | 10 | 8 | 30.0 | 50.0 | 25.0 |",
    ]);
  });

  describe("paired comparison", () => {
    type Outcomes = NonNullable<EvalReport["outcomes"]>;
    const outcomes = (rows: Array<[string, number, number[]]>): Outcomes =>
      rows.flatMap(([task, index, successes]) =>
        successes.map((success, sample) => ({ task, index, sample, status: "completed", success })),
      );
    const base = {
      ...evalReport("v0 (base)", 0.25, 0.25),
      outcomes: outcomes([
        ["db", 1, [0]],
        ["db", 2, [1]],
        ["db", 3, [0]],
        ["db", 4, [0]],
        ["kg", 1, [1, 0]],
        ["kg", 2, [0, 0]],
        ["kg", 3, [1, 1]], // not evaluated under the newer policy: left out of the pairs
      ]),
    };
    const newer = {
      ...evalReport("v9", 0.75, 0.75),
      outcomes: outcomes([
        ["db", 1, [1]],
        ["db", 2, [1]],
        ["db", 3, [1]],
        ["db", 4, [0]],
        ["kg", 1, [1, 1]],
        ["kg", 2, [0, 1]],
      ]),
    };

    it("differences instance by instance, samples averaged first, with a 95% interval", () => {
      const [db, kg, avg] = pairedDifference(base, newer) ?? [];
      // db: differences 1, 0, 1, 0 -> mean 0.5, sample variance 1/3, se sqrt(1/12).
      expect(db).toMatchObject({ task: "db", instances: 4, better: 2, worse: 0 });
      expect(db?.difference).toBeCloseTo(0.5, 12);
      expect(db?.halfWidth).toBeCloseTo(1.96 * Math.sqrt(1 / 12), 12);
      // kg: 0.5 -> 1 and 0 -> 0.5, both +0.5: no spread.
      expect(kg).toMatchObject({ task: "kg", instances: 2, difference: 0.5, halfWidth: 0, better: 2, worse: 0 });
      // The unweighted task average: variances of the task means add, over T^2.
      expect(avg).toMatchObject({ task: "avg", instances: 6, difference: 0.5, better: 4, worse: 0 });
      expect(avg?.halfWidth).toBeCloseTo((1.96 * Math.sqrt(1 / 12)) / 2, 12);
      expect(pairedDifference(newer, base)?.[0]).toMatchObject({ difference: -0.5, better: 0, worse: 2 });
    });

    it("is absent for reports without outcomes, and the table follows the success table", () => {
      expect(pairedDifference(evalReport("v0", 0.1, 0.1), newer)).toBeUndefined();
      const plain = [evalReport("v0 (base)", 0.1, 0.3), evalReport("v5", 0.4, 0.6)];
      expect(evalComparisonMarkdown(plain)).toBe(evalTableMarkdown(plain));
      const lines = evalComparisonMarkdown([base, newer]).split("\n");
      expect(lines.slice(0, 4)).toEqual(evalTableMarkdown([base, newer]).split("\n"));
      expect(lines.slice(5)).toEqual([
        "| v9 − v0 (base) | instances | difference | 95% interval | better / worse |",
        "|---|---|---|---|---|",
        "| db | 4 | +50.0 | −6.6 to +106.6 | 2 / 0 |",
        "| kg | 2 | +50.0 | +50.0 to +50.0 | 2 / 0 |",
        "| avg | 6 | +50.0 | +21.7 to +78.3 | 4 / 0 |",
      ]);
      const html = renderReport({ title: "paired", records: [], evals: [base, newer], facts: [] });
      expect(html).toContain("<th>v9 − v0 (base)</th>");
      expect(html).toContain("<tr><td>avg</td><td>6</td><td>+50.0</td><td>+21.7 to +78.3</td><td>4 / 0</td></tr>");
      expect(renderReport({ title: "plain", records: [], evals: plain, facts: [] })).not.toContain("95% interval");
    });
  });

  it("renders charts per task, the staleness histogram and escapes text", () => {
    const html = renderReport({
      title: "run <1>",
      records,
      evals: [
        evalReport("v1", 0.5, 0.5),
        {
          ...evalReport("v2 T=1 k=8", 0.25, 0.5),
          tasks: evalReport("v2", 0.25, 0.5).tasks.map((t) => ({ ...t, samples: 8, passAtK: 0.75, mixedShare: 0.5 })),
        },
      ],
      facts: [["steps", "2"]],
    });
    expect(html).toContain("run &#60;1&#62;");
    // Greedy cells hold the success only; sampled ones add pass@k.
    expect(html).toContain("<td>v1</td><td>50.0</td><td>50.0</td>");
    expect(html).toContain("<td>25.0 <small>pass@8 75.0</small></td>");
    // five uPlot charts, their data inline and uPlot itself inlined: the page fetches nothing
    expect(html.match(/<div class="chart" id="chart-/g)?.length).toBe(6);
    const data = /<script id="chart-data" type="application\/json">(.*?)<\/script>/s.exec(html)?.[1] ?? "";
    const specs = JSON.parse(data) as ChartSpec[];
    expect(specs.map((s) => s.id)).toEqual(["success", "reward", "throughput", "logp-gap", "losses", "staleness"]);
    expect(specs[0]).toMatchObject({ x: [0, 1], series: [{ name: "db", values: [25, 50] }, { name: "kg" }] });
    expect(specs[5]).toMatchObject({ x: [0, 1, 2], series: [{ values: [180, 20, 5] }] });
    expect(html).not.toContain("Log-prob gap alarm");
    expect(html).toContain("Staleness of trained tokens");
    expect(html).toMatch(/uPlot/);
    expect(html).not.toMatch(/<script[^>]*\ssrc=|<link[^>]*href=|https?:\/\/[^"' ]*\.(js|css)/);
  });

  it("plots the trainer's generated tokens per second beside trajectories per second", () => {
    const throughput = chartSpecs([
      record(1, { "throughput/tokens_per_s": 50, "throughput/trajectories_per_s": 2 }),
      record(2, { "throughput/tokens_per_s": 30 }),
    ]).find((s) => s.id === "throughput");
    expect(throughput?.series).toEqual([
      { name: "trajectories/s", values: [2, null] },
      { name: "generated tokens/s", values: [50, 30], right: true },
    ]);
  });

  it("marks the steps whose log-prob gap passed the alarm, with the worst gap", () => {
    const alarmed = [
      record(0, { "policy/logp_gap_fresh": 0.001, "policy/logp_gap_alarm": 0 }),
      record(1, { "policy/logp_gap_fresh": 0.25, "policy/logp_gap_alarm": 1 }),
      record(2, { "policy/logp_gap_fresh": 0.05, "policy/logp_gap_alarm": 1 }),
    ];
    const html = renderReport({ title: "gap", records: alarmed, evals: [], facts: [] });
    expect(html).toMatch(/Log-prob gap alarm<\/b> at steps 1, 2: .* up to 0\.250 nats/);
  });

  it("says so when nothing was recorded", () => {
    const html = renderReport({ title: "empty", records: [], evals: [], facts: [] });
    expect(html).toContain("No trainer steps were recorded.");
    expect(html).toContain("No evaluation was run.");
  });

  it("keeps the last line of a step a restarted trainer trained again, in step order", async () => {
    const file = join(tempDir("agentrl-report-"), "metrics.jsonl");
    const first = { ...records[0]!, step: 2, metrics: { "loss/total": 1 } };
    const again = { ...records[0]!, step: 2, metrics: { "loss/total": 2 } };
    const one = { ...records[0]!, step: 1 };
    writeFileSync(file, [first, one, again].map((r) => JSON.stringify(r)).join("\n\n"));
    const read = await readMetrics(file);
    expect(read.map((r) => r.step)).toEqual([1, 2]);
    expect(read[1]?.metrics["loss/total"]).toBe(2);
  });

  it("reports a malformed metrics line with its number", async () => {
    const dir = tempDir("agentrl-report-");
    const file = join(dir, "metrics.jsonl");
    writeFileSync(file, `${JSON.stringify(records[0])}\n{"step": "x"}\n`);
    await expect(readMetrics(file)).rejects.toThrow(/line 2/);
  });
});
