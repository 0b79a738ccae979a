import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseJsonOrThrow } from "../../shared/errors.ts";
import { type EvalReport, StepMetrics } from "../../shared/protocol/metrics.ts";
import { readTrackerLinks, type TrackerLinks } from "../../shared/tracking/links.ts";
import { chartSpecs, chartsHtml } from "./charts.ts";

export { stalenessHistogram, tasksIn } from "./charts.ts";

/** Text safe in HTML content and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * Reads metrics.jsonl: one record per step, in step order. A trainer restarted after a kill trains
 * the steps since its last published version again, so a step can have several lines: the last
 * one describes the weights that were kept. A malformed line is reported with its line number,
 * never skipped silently.
 */
export async function readMetrics(file: string): Promise<StepMetrics[]> {
  const text = await readFile(file, "utf8").catch(() => "");
  const byStep = new Map<number, StepMetrics>();
  text.split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    const record = parseJsonOrThrow(StepMetrics, line, `${file} line ${i + 1}`);
    byStep.set(record.step, record);
  });
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

export function evalTableMarkdown(reports: readonly EvalReport[]): string {
  const tasks = [...new Set(reports.flatMap((r) => r.tasks.map((t) => t.task)))].sort();
  const header = `| policy | ${tasks.join(" | ")} | avg |`;
  const rule = `|---|${tasks.map(() => "---").join("|")}|---|`;
  const rows = reports.map((r) => {
    const cells = tasks.map((task) => {
      const row = r.tasks.find((t) => t.task === task);
      return row ? (100 * row.success).toFixed(1) : "–";
    });
    return `| ${r.policy} | ${cells.join(" | ")} | ${(100 * r.averageSuccess).toFixed(1)} |`;
  });
  return [header, rule, ...rows].join("\n");
}

/** A success difference in points with its sign: `+6.5`, `−1.0`. */
function signedPoints(x: number): string {
  return `${x >= 0 ? "+" : "−"}${Math.abs(100 * x).toFixed(1)}`;
}

/** The newest policy against the base on the same instances (`pairedDifference`), one task a row. */
export interface PairedDifference {
  /** Task name, or `avg` for the unweighted average over tasks the success table shows. */
  readonly task: string;
  /** Instances evaluated under both policies. */
  readonly instances: number;
  /** Mean over those instances of (other − base) success; a sampled instance's samples are averaged first. */
  readonly difference: number;
  /** Half width of the 95% interval of `difference` (normal approximation over instances). */
  readonly halfWidth: number;
  readonly better: number;
  readonly worse: number;
}

/**
 * Compares two evaluations instance by instance. Greedy success on a few hundred instances moves
 * by several points between similar policies, so a raise is only clear when this interval
 * excludes zero. Undefined when either report has no outcomes (written before they were kept) or
 * they share no instance.
 */
export function pairedDifference(base: EvalReport, other: EvalReport): PairedDifference[] | undefined {
  if (!base.outcomes || !other.outcomes) return undefined;
  const perInstance = (report: EvalReport) => {
    const sums = new Map<string, { task: string; total: number; count: number }>();
    for (const o of report.outcomes ?? []) {
      const key = `${o.task}#${o.index}`;
      const entry = sums.get(key) ?? { task: o.task, total: 0, count: 0 };
      entry.total += o.success;
      entry.count += 1;
      sums.set(key, entry);
    }
    return sums;
  };
  const before = perInstance(base);
  const after = perInstance(other);
  const differences = new Map<string, number[]>();
  for (const [key, b] of before) {
    const a = after.get(key);
    if (!a) continue;
    const list = differences.get(b.task) ?? [];
    list.push(a.total / a.count - b.total / b.count);
    differences.set(b.task, list);
  }
  if (differences.size === 0) return undefined;
  const rows = [...differences.entries()]
    .sort(([x], [y]) => x.localeCompare(y))
    .map(([task, d]) => {
      const mean = d.reduce((s, x) => s + x, 0) / d.length;
      const variance = d.length > 1 ? d.reduce((s, x) => s + (x - mean) ** 2, 0) / (d.length - 1) : 0;
      return {
        task,
        instances: d.length,
        difference: mean,
        halfWidth: 1.96 * Math.sqrt(variance / d.length),
        better: d.filter((x) => x > 0).length,
        worse: d.filter((x) => x < 0).length,
      };
    });
  // The average of independent task means: its variance is the sum of theirs over T².
  const sum = (f: (r: PairedDifference) => number) => rows.reduce((s, r) => s + f(r), 0);
  const average: PairedDifference = {
    task: "avg",
    instances: sum((r) => r.instances),
    difference: sum((r) => r.difference) / rows.length,
    halfWidth: Math.sqrt(sum((r) => r.halfWidth ** 2)) / rows.length,
    better: sum((r) => r.better),
    worse: sum((r) => r.worse),
  };
  return [...rows, average];
}

/** The last report against the first (`pairedDifference`), when there are two with outcomes. */
function newestAgainstBase(reports: readonly EvalReport[]): { title: string; rows: PairedDifference[] } | undefined {
  const base = reports[0];
  const newest = reports.at(-1);
  if (!base || !newest || base === newest) return undefined;
  const rows = pairedDifference(base, newest);
  return rows && { title: `${newest.policy} − ${base.policy}`, rows };
}

/** A paired row's 95% interval in points: `+3.2 to +9.8`. */
function intervalText(r: PairedDifference): string {
  return `${signedPoints(r.difference - r.halfWidth)} to ${signedPoints(r.difference + r.halfWidth)}`;
}

/** `pairedDifference` of the last report against the first, as a table in points; "" when there is none. */
export function pairedTableMarkdown(reports: readonly EvalReport[]): string {
  const paired = newestAgainstBase(reports);
  if (!paired) return "";
  return [
    `| ${paired.title} | instances | difference | 95% interval | better / worse |`,
    "|---|---|---|---|---|",
    ...paired.rows.map(
      (r) =>
        `| ${r.task} | ${r.instances} | ${signedPoints(r.difference)} | ${intervalText(r)} | ${r.better} / ${r.worse} |`,
    ),
  ].join("\n");
}

/** The success table, then the newest policy's paired comparison with the base when there is one. */
export function evalComparisonMarkdown(reports: readonly EvalReport[]): string {
  const paired = pairedTableMarkdown(reports);
  return paired ? `${evalTableMarkdown(reports)}\n\n${paired}` : evalTableMarkdown(reports);
}

/**
 * For a report sampled several times per instance: per task, the mean success (pass@1), pass@k
 * and the share of instances whose samples disagree. Empty when the report has one sample each.
 */
export function samplingTableMarkdown(report: EvalReport): string {
  const sampled = report.tasks.filter((t) => t.samples !== undefined);
  if (sampled.length === 0) return "";
  const pct = (x: number | undefined) => (100 * (x ?? 0)).toFixed(1);
  return [
    `| ${report.policy} | instances | samples | pass@1 | pass@k | mixed groups |`,
    "|---|---|---|---|---|---|",
    ...sampled.map(
      (t) =>
        `| ${t.task} | ${t.episodes / (t.samples ?? 1)} | ${t.samples} | ${pct(t.success)} | ${pct(t.passAtK)} | ${pct(t.mixedShare)} |`,
    ),
  ].join("\n");
}

/**
 * Reports of one evaluation: their success table (the last policy compared with the first,
 * instance by instance, when there are several), then per task with kinds the success per kind
 * of each policy, then each sampled report's pass@k table.
 */
export function evalReportMarkdown(reports: readonly EvalReport[]): string {
  return [evalComparisonMarkdown(reports), categoryTablesMarkdown(reports), ...reports.map(samplingTableMarkdown)]
    .filter(Boolean)
    .join("\n\n");
}

/**
 * For each task whose instances have kinds, success per kind beside the total, one row per
 * report, as AgentBench reports DBBench (one column per question type); "" when no task has kinds.
 */
export function categoryTablesMarkdown(reports: readonly EvalReport[]): string {
  const tasks = [...new Set(reports.flatMap((r) => r.tasks.filter((t) => t.categories).map((t) => t.task)))];
  const tables = tasks.map((task) => {
    const rows = reports.flatMap((report) => {
      const row = report.tasks.find((t) => t.task === task && t.categories);
      return row ? [{ policy: report.policy, row }] : [];
    });
    const kinds = [...new Set(rows.flatMap(({ row }) => Object.keys(row.categories ?? {})))].sort();
    const cell = (row: EvalReport["tasks"][number], kind: string) => {
      const c = row.categories?.[kind];
      return c ? `${(100 * c.success).toFixed(1)} (${c.episodes})` : "–";
    };
    return [
      `| ${task}: success % (episodes) | ${kinds.join(" | ")} | total |`,
      `|---|${kinds.map(() => "---").join("|")}|---|`,
      ...rows.map(
        ({ policy, row }) =>
          `| ${policy} | ${kinds.map((k) => cell(row, k)).join(" | ")} | ${(100 * row.success).toFixed(1)} (${row.episodes}) |`,
      ),
    ].join("\n");
  });
  return tables.join("\n\n");
}

function evalTableHtml(reports: readonly EvalReport[]): string {
  const tasks = [...new Set(reports.flatMap((r) => r.tasks.map((t) => t.task)))].sort();
  const head = `<tr><th>policy</th>${tasks.map((t) => `<th>${escapeXml(t)}</th>`).join("")}<th>avg</th></tr>`;
  const rows = reports.map((r) => {
    const cells = tasks.map((task) => {
      const row = r.tasks.find((t) => t.task === task);
      if (!row) return "<td>–</td>";
      // A sampled evaluation also shows pass@k beside the mean success (pass@1).
      const passAtK =
        row.passAtK === undefined ? "" : ` <small>pass@${row.samples} ${(100 * row.passAtK).toFixed(1)}</small>`;
      return `<td>${(100 * row.success).toFixed(1)}${passAtK}</td>`;
    });
    return `<tr><td>${escapeXml(r.policy)}</td>${cells.join("")}<td><b>${(100 * r.averageSuccess).toFixed(1)}</b></td></tr>`;
  });
  return `<table>${head}${rows.join("")}</table>`;
}

/** `pairedDifference` of the last report against the first as an HTML table; "" when there is none. */
function pairedTableHtml(reports: readonly EvalReport[]): string {
  const paired = newestAgainstBase(reports);
  if (!paired) return "";
  const head = `<tr><th>${escapeXml(paired.title)}</th><th>instances</th><th>difference</th><th>95% interval</th><th>better / worse</th></tr>`;
  const body = paired.rows.map(
    (r) =>
      `<tr><td>${escapeXml(r.task)}</td><td>${r.instances}</td><td>${signedPoints(r.difference)}</td><td>${intervalText(r)}</td><td>${r.better} / ${r.worse}</td></tr>`,
  );
  return `<table>${head}${body.join("")}</table>`;
}

/** A warning naming the steps whose rollout/trainer log-prob gap passed trainer.logpGapAlarm; "" when none did. */
export function logpGapAlarmHtml(records: readonly StepMetrics[]): string {
  const alarmed = records.filter((r) => r.metrics["policy/logp_gap_alarm"] === 1);
  if (alarmed.length === 0) return "";
  const worst = Math.max(...alarmed.map((r) => r.metrics["policy/logp_gap_fresh"] ?? 0));
  const steps = alarmed.map((r) => r.step).join(", ");
  return `<p class="alarm"><b>Log-prob gap alarm</b> at step${alarmed.length > 1 ? "s" : ""} ${steps}: the rollout log-probs of tokens from the trainer's own weights differ from the trainer's by up to ${worst.toPrecision(3)} nats (above trainer.logpGapAlarm). The served and the trained policy disagree; the trainer log names the worst trajectory.</p>`;
}

export interface ReportInput {
  readonly title: string;
  readonly records: readonly StepMetrics[];
  readonly evals: readonly EvalReport[];
  /** Free-form facts shown at the top (config summary, durations). */
  readonly facts: ReadonlyArray<readonly [string, string]>;
  /** Tracker runs holding the same metrics per step (trackers.json). */
  readonly trackers?: TrackerLinks;
}

/** Links to the tracker runs that hold every step's metrics (the MLflow and W&B run pages). */
function trackersHtml(links: TrackerLinks): string {
  const runs = [
    ...(links.mlflow ? [["MLflow", links.mlflow.url, links.mlflow.runId] as const] : []),
    ...(links.wandb ? [["W&amp;B", links.wandb.url, links.wandb.runId] as const] : []),
  ];
  if (runs.length === 0) return "";
  const linked = runs.map(([name, url, id]) => `in ${name}: <a href="${escapeXml(url)}">run ${escapeXml(id)}</a>`);
  return `<p id="tracker-run">Every step's metrics, by step, ${linked.join("; ")}</p>`;
}

/** The run report: facts, success table (§6 layout), and uPlot charts of success, reward, throughput, losses and staleness. */
export function renderReport(input: ReportInput): string {
  const charts = chartsHtml(chartSpecs(input.records));
  const facts = input.facts.map(([k, v]) => `<tr><th>${escapeXml(k)}</th><td>${escapeXml(v)}</td></tr>`).join("");
  const alarms = logpGapAlarmHtml(input.records);
  return `<!doctype html>
<html><head><meta charset="utf-8"><title>${escapeXml(input.title)}</title>
<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f4f4f4}.charts{display:flex;flex-wrap:wrap;gap:16px}
.chart{border:1px solid #eee;padding:4px}.alarm{background:#fde8e8;border:1px solid #c00;padding:8px}</style>
</head><body>
<h1>${escapeXml(input.title)}</h1>
<table>${facts}</table>
${trackersHtml(input.trackers ?? {})}
${alarms}
<h2>Test success (%)</h2>
${input.evals.length > 0 ? evalTableHtml(input.evals) + pairedTableHtml(input.evals) : "<p>No evaluation was run.</p>"}
<h2>Training curves</h2>
${charts || "<p>No trainer steps were recorded.</p>"}
<p><small>Synthetic tasks, tiny model: figures describe this run only.</small></p>
</body></html>
`;
}

/** Builds `<runDir>/report.html` from `<runDir>/metrics.jsonl` and `<runDir>/eval-*.json`. */
export async function writeRunReport(
  runDir: string,
  evals: readonly EvalReport[],
  facts: ReadonlyArray<readonly [string, string]>,
): Promise<string> {
  const records = await readMetrics(join(runDir, "metrics.jsonl"));
  const file = join(runDir, "report.html");
  await writeFile(
    file,
    renderReport({ title: `agentrl-ts run ${runDir}`, records, evals, facts, trackers: readTrackerLinks(runDir) }),
  );
  return file;
}
