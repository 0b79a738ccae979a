/**
 * The learning tables (the reference's Tables 3, 4 and 6 in miniature) from finished arms: pure
 * functions over each arm's stored result, so `npm run learning` prints the same tables from a
 * rerun that ran nothing. Success is in points (0–100); each seed's paired 95% interval comes from
 * pairedDifference (instance by instance); across seeds: mean and the range.
 */
import { z } from "zod";
import { pairedDifference } from "../cli/report/report.ts";
import { EvalReport } from "../shared/protocol/metrics.ts";

/** What one arm's run leaves behind (`<out>/<arm>/seed-<s>/result.json`). */
export const ArmResult = z.object({
  schemaVersion: z.literal(1),
  arm: z.string(),
  seed: z.number().int(),
  config: z.string(),
  sets: z.array(z.string()),
  wallSeconds: z.number().nonnegative(),
  base: EvalReport,
  newest: EvalReport,
  /**
   * Mean over the run's steps of its advantage statistics (`task/<t>/adv_*`, `pool/<p>/*`, see
   * trainer-image/trainer/batch.ts advantageMetrics): what task normalization and the stale pool did.
   */
  advantages: z.record(z.string(), z.number()).optional(),
  /**
   * Group members dropped after every attempt failed (`rollout/env_failures` summed over steps):
   * a step that lost one trained a smaller batch than its seed drew, so the arm is not the seeded
   * result. Retried episodes replay their draws and do not count. Absent in results stored before it was kept.
   */
  droppedMembers: z.number().int().nonnegative().optional(),
});
export type ArmResult = z.infer<typeof ArmResult>;

/** Members dropped over a run's steps (`rollout/env_failures` per step in metrics.jsonl lines). */
export function droppedMembersOf(lines: readonly Record<string, unknown>[]): number {
  return lines.reduce((sum, line) => {
    const dropped = line["rollout/env_failures"];
    return sum + (typeof dropped === "number" && Number.isFinite(dropped) ? dropped : 0);
  }, 0);
}

/**
 * Whether every arm trained the batches its seed drew: names each arm that dropped group members
 * (and how many), or says none did; arms stored without the count are counted apart.
 */
export function seededNote(results: readonly ArmResult[]): string {
  const unknown = results.filter((r) => r.droppedMembers === undefined).length;
  const dropped = bySeed(results.filter((r) => (r.droppedMembers ?? 0) > 0));
  const unrecorded = unknown > 0 ? ` (${unknown} stored without the count)` : "";
  if (dropped.length === 0)
    return `No arm dropped a group member${unrecorded}: every step trained the batch its seed drew.`;
  const named = dropped.map((r) => `${r.arm} seed ${r.seed} (${r.droppedMembers})`).join(", ");
  return `Arms that dropped group members after every retry failed, so trained smaller batches than their seeds drew and are not the seeded result: ${named}${unrecorded}.`;
}

const ADVANTAGE_KEY = /^(task\/[^/]+\/adv_[a-z_]+|pool\/[^/]+\/(tokens|adv_mean))$/;

/** The mean over steps of each advantage statistic in metrics.jsonl lines (steps lacking a key do not count for it). */
export function advantageSummary(lines: readonly Record<string, unknown>[]): Record<string, number> {
  const sums = new Map<string, { sum: number; steps: number }>();
  for (const line of lines)
    for (const [key, value] of Object.entries(line)) {
      if (!ADVANTAGE_KEY.test(key) || typeof value !== "number" || !Number.isFinite(value)) continue;
      const entry = sums.get(key) ?? { sum: 0, steps: 0 };
      entry.sum += value;
      entry.steps += 1;
      sums.set(key, entry);
    }
  return Object.fromEntries([...sums].map(([key, { sum, steps }]) => [key, sum / steps]));
}

/** Success of `task` (or "avg") in points. */
function points(report: EvalReport, task: string): number {
  if (task === "avg") return report.averageSuccess * 100;
  const row = report.tasks.find((t) => t.task === task);
  return row === undefined ? Number.NaN : row.success * 100;
}

/** A number with a typographic minus, as the tables' paired differences print it; none on a rounded zero. */
export function fixed(x: number, digits = 1): string {
  if (Number.isNaN(x)) return "–";
  const text = x.toFixed(digits);
  if (Number(text) === 0) return (0).toFixed(digits);
  return text.startsWith("-") ? `−${text.slice(1)}` : text;
}

/** As fixed, with a "+" on anything that does not print negative. */
export function signed(x: number, digits = 1): string {
  const text = fixed(x, digits);
  return Number.isNaN(x) || text.startsWith("−") ? text : `+${text}`;
}

/** "12.3 (10.5 to 14.0)": mean over seeds and their range; one value (or all equal) prints just it. */
export function meanAndRange(values: readonly number[], format: (x: number) => string = fixed): string {
  const finite = values.filter((v) => !Number.isNaN(v));
  if (finite.length === 0) return "–";
  const mean = finite.reduce((a, b) => a + b, 0) / finite.length;
  if (finite.every((v) => v === finite[0])) return format(mean);
  return `${format(mean)} (${format(Math.min(...finite))} to ${format(Math.max(...finite))})`;
}

/** Paired difference newest − base of one task ("avg": every task), in points, with its 95% interval. */
export function pairedPoints(base: EvalReport, other: EvalReport, task: string): string {
  const rows = pairedDifference(base, other);
  const row = rows?.find((r) => r.task === task);
  if (!row) return "–";
  const d = row.difference * 100;
  const h = row.halfWidth * 100;
  return `${signed(d)} (${signed(d - h)} to ${signed(d + h)})`;
}

function tasksOf(results: readonly ArmResult[]): string[] {
  const names = new Set<string>();
  for (const r of results) for (const t of r.newest.tasks) names.add(t.task);
  return [...names].sort();
}

function bySeed(results: readonly ArmResult[]): ArmResult[] {
  return [...results].sort((a, b) => a.seed - b.seed);
}

/** Table 3: the base and RL from it, per seed, per task and average, with each seed's paired interval. */
export function table3(arm: readonly ArmResult[]): string {
  const runs = bySeed(arm);
  const tasks = [...tasksOf(runs), "avg"];
  const head = `| seed | ${tasks.map((t) => `base ${t}`).join(" | ")} | ${tasks.map((t) => `RL ${t}`).join(" | ")} | RL − base avg (95%) |`;
  const lines = [head, `|${"---|".repeat(2 * tasks.length + 2)}`];
  for (const r of runs)
    lines.push(
      `| ${r.seed} | ${tasks.map((t) => fixed(points(r.base, t))).join(" | ")} | ${tasks.map((t) => fixed(points(r.newest, t))).join(" | ")} | ${pairedPoints(r.base, r.newest, "avg")} |`,
    );
  lines.push(
    `| mean (range) | ${tasks.map((t) => meanAndRange(runs.map((r) => points(r.base, t)))).join(" | ")} | ${tasks.map((t) => meanAndRange(runs.map((r) => points(r.newest, t)))).join(" | ")} | ${meanAndRange(
      runs.map((r) => points(r.newest, "avg") - points(r.base, "avg")),
      signed,
    )} |`,
  );
  return lines.join("\n");
}

/** The kind of a task's instance (its question type or generator family), or undefined. */
export type KindOf = (task: string, index: number) => string | undefined;

/**
 * What was learned: per task and instance kind, the base's and the RL policy's greedy successes
 * summed over seeds (instance by instance, from the stored outcomes), and how many instances
 * each gained or lost. Kinds in task then name order; tasks without kinds are left out.
 */
export function kindTable(arm: readonly ArmResult[], kindOf: KindOf): string {
  const rows = new Map<string, { episodes: number; base: number; rl: number; better: number; worse: number }>();
  for (const r of bySeed(arm)) {
    const rl = new Map((r.newest.outcomes ?? []).map((o) => [`${o.task}/${o.index}/${o.sample}`, o.success]));
    for (const o of r.base.outcomes ?? []) {
      const after = rl.get(`${o.task}/${o.index}/${o.sample}`);
      const kind = kindOf(o.task, o.index);
      if (after === undefined || kind === undefined) continue;
      const key = `${o.task} | ${kind}`;
      const row = rows.get(key) ?? { episodes: 0, base: 0, rl: 0, better: 0, worse: 0 };
      row.episodes += 1;
      row.base += o.success;
      row.rl += after;
      if (after > o.success) row.better += 1;
      if (after < o.success) row.worse += 1;
      rows.set(key, row);
    }
  }
  const lines = [
    "| task | kind | episodes (all seeds) | base successes | RL successes | better / worse |",
    "|---|---|---|---|---|---|",
  ];
  for (const [key, row] of [...rows].sort(([a], [b]) => a.localeCompare(b)))
    lines.push(`| ${key} | ${row.episodes} | ${row.base} | ${row.rl} | ${row.better} / ${row.worse} |`);
  return rows.size === 0 ? "" : lines.join("\n");
}

/**
 * How the base's and the RL policy's greedy test episodes ended (completed, an invalid call, the
 * turn limit, ...), per task, summed over seeds: what RL changed in how the policy acts, beside
 * whether it succeeds. Tasks in name order, endings by the base's count.
 */
export function endingTable(arm: readonly ArmResult[]): string {
  const rows = new Map<string, Map<string, { base: number; rl: number }>>();
  const add = (report: EvalReport, side: "base" | "rl") => {
    for (const { task, statuses } of report.tasks) {
      const endings = rows.get(task) ?? new Map<string, { base: number; rl: number }>();
      for (const [ending, count] of Object.entries(statuses)) {
        const row = endings.get(ending) ?? { base: 0, rl: 0 };
        row[side] += count;
        endings.set(ending, row);
      }
      rows.set(task, endings);
    }
  };
  for (const r of bySeed(arm)) {
    add(r.base, "base");
    add(r.newest, "rl");
  }
  const lines = ["| task | ended by | base episodes (all seeds) | RL episodes (all seeds) |", "|---|---|---|---|"];
  for (const [task, endings] of [...rows].sort(([a], [b]) => a.localeCompare(b)))
    for (const [ending, row] of [...endings].sort(([a, x], [b, y]) => y.base - x.base || a.localeCompare(b)))
      lines.push(`| ${task} | ${ending} | ${row.base} | ${row.rl} |`);
  return rows.size === 0 ? "" : lines.join("\n");
}

/**
 * Table 4: the multi-task run against each task's single-task runs (equal steps, equal per-task
 * data), on that task: mean (range) over seeds, and per seed the paired difference multi − single.
 */
export function table4(multi: readonly ArmResult[], singles: ReadonlyMap<string, readonly ArmResult[]>): string {
  const lines = [
    "| task | comparison | multi-task | single-task | multi − single, per seed (paired 95%) |",
    "|---|---|---|---|---|",
  ];
  for (const task of tasksOf(multi)) {
    for (const [label, key] of [
      ["equal steps", `${task}@steps`],
      ["equal per-task data", `${task}@data`],
    ] as const) {
      const single = bySeed(singles.get(key) ?? []);
      const pairs = bySeed(multi).flatMap((m) => {
        const s = single.find((x) => x.seed === m.seed);
        return s ? [`s${m.seed} ${pairedPoints(s.newest, m.newest, task)}`] : [];
      });
      lines.push(
        `| ${task} | ${label} | ${meanAndRange(multi.map((m) => points(m.newest, task)))} | ${meanAndRange(single.map((s) => points(s.newest, task)))} | ${pairs.join("; ") || "–"} |`,
      );
    }
  }
  return lines.join("\n");
}

/**
 * Table 6: the full run against each ablation, per task and average, with per-seed paired
 * differences; `names` labels the two sides (Table 3's control is RL's own ablation).
 */
export function table6(
  full: readonly ArmResult[],
  ablations: ReadonlyMap<string, readonly ArmResult[]>,
  names: { readonly full: string; readonly ablation: string } = { full: "full", ablation: "ablation" },
): string {
  const tasks = [...tasksOf(full), "avg"];
  const lines = [
    `| run | ${tasks.join(" | ")} | ${names.ablation} − ${names.full} avg, per seed (paired 95%) |`,
    `|${"---|".repeat(tasks.length + 2)}`,
  ];
  const row = (label: string, results: readonly ArmResult[], pairs: string) =>
    `| ${label} | ${tasks.map((t) => meanAndRange(results.map((r) => points(r.newest, t)))).join(" | ")} | ${pairs} |`;
  lines.push(row(`${names.full} (base avg ${meanAndRange(full.map((r) => points(r.base, "avg")))})`, full, "–"));
  for (const [label, results] of ablations) {
    const pairs = bySeed(results).flatMap((a) => {
      const f = full.find((x) => x.seed === a.seed);
      return f ? [`s${a.seed} ${pairedPoints(f.newest, a.newest, "avg")}`] : [];
    });
    lines.push(row(label, results, pairs.join("; ") || "–"));
  }
  return lines.join("\n");
}

/**
 * Table 6's mechanisms at work, per arm (mean over seeds of each run's mean over steps): per task the
 * estimator's token advantages (mean ± std) and what the loss used, and the stale pool's share of
 * trained tokens with the mean advantage its tokens got against the current pool's.
 */
export function advantageTable(arms: ReadonlyMap<string, readonly ArmResult[]>): string {
  const withStats = [...arms].filter(([, results]) => results.some((r) => r.advantages));
  if (withStats.length === 0) return "(no advantage statistics: runs made before they were recorded)";
  const avg = (results: readonly ArmResult[], key: string) => {
    const values = results.flatMap((r) => (r.advantages?.[key] === undefined ? [] : [r.advantages[key] as number]));
    return values.length ? values.reduce((s, v) => s + v, 0) / values.length : Number.NaN;
  };
  const tasks = [
    ...new Set(
      withStats.flatMap(([, results]) =>
        results.flatMap((r) =>
          Object.keys(r.advantages ?? {}).flatMap((k) => /^task\/([^/]+)\/adv_raw_mean$/.exec(k)?.[1] ?? []),
        ),
      ),
    ),
  ].sort();
  const lines = [
    `| run | ${tasks.map((t) => `${t}: estimator mean ± std → trained mean ± std`).join(" | ")} | stale-pool tokens | stale / current mean advantage |`,
    `|${"---|".repeat(tasks.length + 3)}`,
  ];
  for (const [label, results] of withStats) {
    const cells = tasks.map((t) => {
      const k = (name: string) => avg(results, `task/${t}/${name}`);
      return `${signed(k("adv_raw_mean"), 3)} ± ${fixed(k("adv_raw_std"), 3)} → ${signed(k("adv_mean"), 3)} ± ${fixed(k("adv_std"), 3)}`;
    });
    const stale = avg(results, "pool/stale/tokens");
    const current = avg(results, "pool/current/tokens");
    const share = Number.isNaN(stale) ? 0 : stale / (stale + (Number.isNaN(current) ? 0 : current));
    lines.push(
      `| ${label} | ${cells.join(" | ")} | ${(share * 100).toFixed(1)}% | ${signed(avg(results, "pool/stale/adv_mean"), 3)} / ${signed(avg(results, "pool/current/adv_mean"), 3)} |`,
    );
  }
  return lines.join("\n");
}
