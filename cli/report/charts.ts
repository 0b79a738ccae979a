import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import type { StepMetrics } from "../../shared/protocol/metrics.ts";

/**
 * The report's charts, drawn in the page by uPlot (the exact version pinned in package.json),
 * whose script and stylesheet are inlined into report.html: the page fetches nothing, so it
 * opens offline and from a CI artifact. Charts are described as data here (tested in Node) and
 * drawn by a short script (tested in Chromium by test/view/browser.test.ts).
 */

export interface ChartSeries {
  readonly name: string;
  /** One value per x (null where the step did not record it). */
  readonly values: ReadonlyArray<number | null>;
  /** Right-hand axis (a second unit on the same chart). */
  readonly right?: boolean;
}

export interface ChartSpec {
  readonly id: string;
  readonly title: string;
  readonly kind: "line" | "bars";
  readonly xLabel: string;
  /** Integer x values: trainer steps, or versions behind for the staleness bars. */
  readonly x: readonly number[];
  readonly yLabel: string;
  readonly rightLabel?: string;
  readonly series: readonly ChartSeries[];
}

/** Task names found in `task/<name>/...` metric keys, sorted. */
export function tasksIn(records: readonly StepMetrics[]): string[] {
  const names = new Set<string>();
  for (const r of records)
    for (const key of Object.keys(r.metrics)) if (key.startsWith("task/")) names.add(key.split("/")[1] ?? "");
  return [...names].filter(Boolean).sort();
}

/** Sums `staleness/<k>` counts over all steps into a histogram ordered by k. */
export function stalenessHistogram(records: readonly StepMetrics[]): Array<[number, number]> {
  const counts = new Map<number, number>();
  for (const r of records)
    for (const [key, value] of Object.entries(r.metrics)) {
      const match = /^staleness\/(\d+)$/.exec(key);
      if (match) counts.set(Number(match[1]), (counts.get(Number(match[1])) ?? 0) + value);
    }
  return [...counts.entries()].sort((a, b) => a[0] - b[0]);
}

/**
 * Generated tokens trained per second of wall time, from each line's `rollout/tokens` and the
 * time since the previous line (the trainer's own `throughput/trajectories_per_s` is measured the same way).
 */
/** The report's charts, from metrics.jsonl's lines; empty when no step was recorded. */
export function chartSpecs(records: readonly StepMetrics[]): ChartSpec[] {
  if (records.length === 0) return [];
  const x = records.map((r) => r.step);
  const metric = (key: string, scale = 1) => records.map((r) => (key in r.metrics ? r.metrics[key]! * scale : null));
  const tasks = tasksIn(records);
  const charts: ChartSpec[] = [
    {
      id: "success",
      title: "Success rate per task (training rollouts)",
      kind: "line",
      xLabel: "trainer step",
      x,
      yLabel: "success (%)",
      series: tasks.map((t) => ({ name: t, values: metric(`task/${t}/success`, 100) })),
    },
    {
      id: "reward",
      title: "Mean reward per task",
      kind: "line",
      xLabel: "trainer step",
      x,
      yLabel: "reward",
      series: tasks.map((t) => ({ name: t, values: metric(`task/${t}/reward`) })),
    },
    {
      id: "throughput",
      title: "Throughput",
      kind: "line",
      xLabel: "trainer step",
      x,
      yLabel: "trajectories / s",
      rightLabel: "generated tokens / s",
      series: [
        { name: "trajectories/s", values: metric("throughput/trajectories_per_s") },
        { name: "generated tokens/s", values: metric("throughput/tokens_per_s"), right: true },
      ],
    },
    {
      id: "logp-gap",
      title: "Rollout/trainer log-prob gap (tokens of the trainer's own weights)",
      kind: "line",
      xLabel: "trainer step",
      x,
      yLabel: "mean |Δ log-prob| (nats)",
      series: [{ name: "logp gap", values: metric("policy/logp_gap_fresh") }],
    },
    {
      id: "losses",
      title: "Losses",
      kind: "line",
      xLabel: "trainer step",
      x,
      yLabel: "loss (token mean)",
      rightLabel: "clipped tokens (%)",
      series: [
        { name: "policy", values: metric("loss/policy") },
        { name: "kl", values: metric("loss/kl") },
        { name: "clipped (%)", values: metric("policy/clip_frac", 100), right: true },
      ],
    },
  ];
  const histogram = stalenessHistogram(records);
  if (histogram.length > 0)
    charts.push({
      id: "staleness",
      title: "Staleness of trained tokens (policy versions behind)",
      kind: "bars",
      xLabel: "versions behind",
      x: histogram.map(([k]) => k),
      yLabel: "trained tokens",
      series: [{ name: "tokens", values: histogram.map(([, v]) => v) }],
    });
  return charts;
}

const require = createRequire(import.meta.url);
let uplotAssets: { script: string; style: string } | undefined;

/** uPlot's minified script and stylesheet from node_modules (read once). */
function uplot(): { script: string; style: string } {
  uplotAssets ??= {
    script: readFileSync(require.resolve("uplot/dist/uPlot.iife.min.js"), "utf8"),
    style: readFileSync(require.resolve("uplot/dist/uPlot.min.css"), "utf8"),
  };
  return uplotAssets;
}

/** JSON safe inside a <script> element. */
export function scriptJson(value: unknown): string {
  return JSON.stringify(value).replace(/</g, "\\u003c");
}

/**
 * Draws every chart into `#chart-<id>`. Integer x ticks (steps are whole), a unit on every axis,
 * "(no data)" in the legend of a series with nothing recorded. Sets `data-charts-drawn` on
 * <body> when done, which the browser test waits for.
 */
const DRAW_SCRIPT = `
(() => {
  const specs = JSON.parse(document.getElementById("chart-data").textContent);
  const palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
  const integerSteps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
  const number = (v) => (v == null ? "–" : Math.abs(v) >= 1000 || Number.isInteger(v) ? v.toLocaleString("en") : Number(v.toPrecision(3)).toString());
  let drawn = 0;
  for (const spec of specs) {
    const el = document.getElementById("chart-" + spec.id);
    const bars = spec.kind === "bars";
    const hasRight = spec.series.some((s) => s.right);
    const axes = [
      { label: spec.xLabel, incrs: integerSteps, values: (u, ticks) => ticks.map((t) => (Number.isInteger(t) ? String(t) : "")) },
      { label: spec.yLabel, size: 60, values: (u, ticks) => ticks.map(number) },
    ];
    if (hasRight) axes.push({ label: spec.rightLabel, scale: "right", side: 1, size: 60, grid: { show: false }, values: (u, ticks) => ticks.map(number) });
    const series = [{ label: spec.xLabel, value: (u, v) => (v == null ? "–" : String(v)) }].concat(
      spec.series.map((s, i) => {
        const empty = s.values.every((v) => v == null);
        return {
          label: empty ? s.name + " (no data)" : s.name,
          stroke: palette[i % palette.length],
          fill: bars ? palette[i % palette.length] + "99" : undefined,
          width: bars ? 1 : 2,
          scale: s.right ? "right" : "y",
          spanGaps: true,
          value: (u, v) => number(v),
          points: { show: !bars && spec.x.length <= 40 },
          paths: bars ? uPlot.paths.bars({ size: [0.6, 80] }) : undefined,
        };
      }),
    );
    const xRange = (u, min, max) => (bars || min === max ? [min - 0.5, max + 0.5] : [min, max]);
    const scales = { x: { time: false, range: xRange } };
    if (bars) scales.y = { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] };
    new uPlot(
      { title: spec.title, width: 560, height: 280, scales, axes, series, legend: { live: true } },
      [spec.x, ...spec.series.map((s) => s.values)],
      el,
    );
    drawn += 1;
  }
  document.body.dataset.chartsDrawn = String(drawn);
})();
`;

/** The charts' containers, data and drawing script, with uPlot inlined. "" when there is no chart. */
export function chartsHtml(specs: readonly ChartSpec[]): string {
  if (specs.length === 0) return "";
  const { script, style } = uplot();
  return `<style>${style}</style>
<div class="charts">${specs.map((s) => `<div class="chart" id="chart-${s.id}"></div>`).join("")}</div>
<script id="chart-data" type="application/json">${scriptJson(specs)}</script>
<script>${script}</script>
<script>${DRAW_SCRIPT}</script>`;
}
