import { describe, expect, it } from "vitest";
import {
  type ArmResult,
  advantageSummary,
  advantageTable,
  droppedMembersOf,
  endingTable,
  fixed,
  kindTable,
  meanAndRange,
  pairedPoints,
  seededNote,
  signed,
  table3,
  table4,
  table6,
} from "../../scripts/learningTables.ts";
import type { EvalReport } from "../../shared/protocol/metrics.ts";

/** A report whose first `solved[task]` of `n` instances per task succeed. */
function report(policy: string, solved: Record<string, number>, n = 10): EvalReport {
  const tasks = Object.entries(solved).map(([task, k]) => ({
    task,
    episodes: n,
    success: k / n,
    meanReward: k / n,
    meanTurns: 2,
    statuses: { completed: n },
  }));
  return {
    schemaVersion: 1,
    policy,
    split: "test",
    createdAt: "2026-01-01T00:00:00Z",
    tasks,
    averageSuccess: tasks.reduce((s, t) => s + t.success, 0) / tasks.length,
    outcomes: Object.entries(solved).flatMap(([task, k]) =>
      Array.from({ length: n }, (_, index) => ({
        task,
        index,
        sample: 0,
        status: "completed",
        success: index < k ? 1 : 0,
      })),
    ),
  };
}

function arm(name: string, seed: number, base: Record<string, number>, newest: Record<string, number>): ArmResult {
  return {
    schemaVersion: 1,
    arm: name,
    seed,
    config: "c.yaml",
    sets: [],
    wallSeconds: 60,
    base: report("v0 (base)", base),
    newest: report("v5", newest),
  };
}

describe("learning tables", () => {
  it("what moved by instance kind: successes summed over seeds, instance by instance", () => {
    // Instances 0–4 are kind "a", 5–9 kind "b"; db's first k of 10 succeed.
    const kindOf = (task: string, index: number) => (task === "db" ? (index < 5 ? "a" : "b") : undefined);
    const runs = [
      arm("multi", 2, { db: 3, os: 1 }, { db: 7, os: 4 }),
      arm("multi", 1, { db: 6, os: 0 }, { db: 4, os: 0 }),
    ];
    // Seed 1: base solves 0–5, RL 0–3 (a 5 → 4, b 1 → 0: 0 better, 2 worse);
    // seed 2: base 0–2, RL 0–6 (a 3 → 5, b 0 → 2: 4 better).
    expect(kindTable(runs, kindOf)).toBe(
      [
        "| task | kind | episodes (all seeds) | base successes | RL successes | better / worse |",
        "|---|---|---|---|---|---|",
        "| db | a | 10 | 8 | 9 | 2 / 1 |",
        "| db | b | 10 | 1 | 2 | 2 / 1 |",
      ].join("\n"),
    );
    expect(kindTable(runs, () => undefined)).toBe("");
  });

  it("how episodes ended: each task's endings for base and RL, summed over seeds, by the base's count", () => {
    const ended = (base: Record<string, number>, rl: Record<string, number>, seed: number): ArmResult => {
      const result = arm("multi", seed, { db: 1 }, { db: 1 });
      const [baseDb] = result.base.tasks;
      const [rlDb] = result.newest.tasks;
      if (!baseDb || !rlDb) throw new Error("no db row");
      baseDb.statuses = base;
      rlDb.statuses = rl;
      return result;
    };
    const runs = [
      ended({ completed: 6, "agent validation failed": 4 }, { completed: 9, "task limit reached": 1 }, 1),
      ended({ completed: 6, "agent validation failed": 4 }, { completed: 10 }, 2),
    ];
    expect(endingTable(runs)).toBe(
      [
        "| task | ended by | base episodes (all seeds) | RL episodes (all seeds) |",
        "|---|---|---|---|",
        "| db | completed | 12 | 19 |",
        "| db | agent validation failed | 8 | 0 |",
        "| db | task limit reached | 0 | 1 |",
      ].join("\n"),
    );
    expect(endingTable([])).toBe("");
  });

  it("numbers print a typographic minus, and a value that rounds to zero prints no minus", () => {
    expect(fixed(-1.25)).toBe("−1.3");
    expect(fixed(-0.0001, 3)).toBe("0.000");
    expect(signed(-0.0001, 3)).toBe("+0.000");
    expect(signed(0.4)).toBe("+0.4");
    expect(signed(-0.4)).toBe("−0.4");
    expect(signed(Number.NaN)).toBe("–");
  });

  it("mean and range over seeds", () => {
    expect(meanAndRange([10, 20, 30])).toBe("20.0 (10.0 to 30.0)");
    expect(meanAndRange([-1, -0.3])).toBe("−0.7 (−1.0 to −0.3)");
    expect(meanAndRange([12.5])).toBe("12.5");
    expect(meanAndRange([26, 26, 26])).toBe("26.0");
    expect(meanAndRange([])).toBe("–");
  });

  it("pairs instance by instance: 3 of 10 more solved is +30 points, with its interval", () => {
    const text = pairedPoints(report("a", { db: 2 }), report("b", { db: 5 }), "db");
    // differences: three 1s, seven 0s: mean 0.3, sd 0.483, half width 1.96 · 0.483 / √10 = 0.2994
    expect(text).toBe("+30.0 (+0.1 to +59.9)");
  });

  it("table 3: per seed base and RL per task and average, the paired average, mean and range", () => {
    const md = table3([
      arm("multi", 2, { db: 1, os: 3 }, { db: 4, os: 5 }),
      arm("multi", 1, { db: 1, os: 3 }, { db: 3, os: 7 }),
    ]);
    const lines = md.split("\n");
    expect(lines[0]).toBe("| seed | base db | base os | base avg | RL db | RL os | RL avg | RL − base avg (95%) |");
    // seeds in order, each with its values
    expect(lines[2]).toMatch(/^\| 1 \| 10\.0 \| 30\.0 \| 20\.0 \| 30\.0 \| 70\.0 \| 50\.0 \| \+30\.0 /);
    expect(lines[3]).toMatch(/^\| 2 \| 10\.0 \| 30\.0 \| 20\.0 \| 40\.0 \| 50\.0 \| 45\.0 \| \+25\.0 /);
    expect(lines[4]).toBe(
      "| mean (range) | 10.0 | 30.0 | 20.0 | 35.0 (30.0 to 40.0) | 60.0 (50.0 to 70.0) | 47.5 (45.0 to 50.0) | +27.5 (+25.0 to +30.0) |",
    );
  });

  it("table 4: multi-task against each task's single-task runs at equal steps and equal data, paired per seed", () => {
    const multi = [arm("multi", 1, { db: 0, os: 0 }, { db: 5, os: 6 })];
    const singles = new Map([
      ["db@steps", [arm("single-db-steps", 1, { db: 0 }, { db: 7 })]],
      ["db@data", [arm("single-db-data", 1, { db: 0 }, { db: 4 })]],
      ["os@steps", [arm("single-os-steps", 1, { os: 0 }, { os: 6 })]],
    ]);
    const md = table4(multi, singles);
    expect(md).toContain("| db | equal steps | 50.0 | 70.0 | s1 −20.0 ");
    expect(md).toContain("| db | equal per-task data | 50.0 | 40.0 | s1 +10.0 ");
    expect(md).toContain("| os | equal steps | 60.0 | 60.0 | s1 +0.0 ");
    // an arm not run yet shows as missing rather than as zero
    expect(md).toContain("| os | equal per-task data | 60.0 | – | – |");
  });

  it("table 6: the full run, each ablation and its per-seed paired difference from the full run", () => {
    const full = [arm("multi", 1, { db: 0, os: 0 }, { db: 5, os: 5 })];
    const ablations = new Map([
      ["without cross-policy sampling", [arm("no-cross-policy", 1, { db: 0, os: 0 }, { db: 3, os: 5 })]],
      ["without task advantage normalization", []],
    ]);
    const md = table6(full, ablations);
    expect(md).toContain("| full (base avg 0.0) | 50.0 | 50.0 | 50.0 | – |");
    expect(md).toContain("| without cross-policy sampling | 30.0 | 50.0 | 40.0 | s1 −10.0 ");
    expect(md).toContain("| without task advantage normalization | – | – | – | – |");
  });

  it("dropped members: summed over steps, and the note names each arm that dropped any", () => {
    expect(droppedMembersOf([{ "rollout/env_failures": 2 }, { "loss/total": 1 }, { "rollout/env_failures": 1 }])).toBe(
      3,
    );
    expect(droppedMembersOf([])).toBe(0);
    const clean = [arm("multi", 1, { db: 1 }, { db: 1 }), arm("multi", 2, { db: 1 }, { db: 1 })].map((r) => ({
      ...r,
      droppedMembers: 0,
    }));
    expect(seededNote(clean)).toBe("No arm dropped a group member: every step trained the batch its seed drew.");
    expect(seededNote([...clean, arm("no-task-norm", 1, { db: 1 }, { db: 1 })])).toBe(
      "No arm dropped a group member (1 stored without the count): every step trained the batch its seed drew.",
    );
    const lossy = { ...arm("no-cross-policy", 3, { db: 1 }, { db: 1 }), droppedMembers: 4 };
    expect(seededNote([...clean, lossy])).toBe(
      "Arms that dropped group members after every retry failed, so trained smaller batches than their seeds drew and are not the seeded result: no-cross-policy seed 3 (4).",
    );
  });

  it("advantage summary: the mean over steps of the advantage keys only, a step without a key not counted for it", () => {
    const summary = advantageSummary([
      { "task/db/adv_raw_mean": -0.2, "task/db/adv_mean": 0, "pool/stale/tokens": 10, "loss/total": 3 },
      { "task/db/adv_raw_mean": 0.4, "task/db/adv_mean": 0, "pool/current/tokens": 30, "task/db/success": 1 },
    ]);
    expect(summary).toEqual({
      "task/db/adv_raw_mean": expect.closeTo(0.1, 12),
      "task/db/adv_mean": 0,
      "pool/stale/tokens": 10,
      "pool/current/tokens": 30,
    });
  });

  it("advantage table: per arm and task the estimator's and the trained advantages, and the stale pool's share", () => {
    const withStats = (name: string, seed: number, advantages: Record<string, number>): ArmResult => ({
      ...arm(name, seed, { db: 1 }, { db: 2 }),
      advantages,
    });
    const full = [
      withStats("multi", 1, {
        "task/db/adv_raw_mean": -0.3,
        "task/db/adv_raw_std": 0.6,
        "task/db/adv_mean": 0,
        "task/db/adv_std": 1,
        "pool/stale/tokens": 20,
        "pool/current/tokens": 80,
        "pool/stale/adv_mean": 0.25,
        "pool/current/adv_mean": -0.05,
      }),
      withStats("multi", 2, {
        "task/db/adv_raw_mean": -0.1,
        "task/db/adv_raw_std": 0.4,
        "task/db/adv_mean": 0,
        "task/db/adv_std": 1,
        "pool/stale/tokens": 20,
        "pool/current/tokens": 80,
        "pool/stale/adv_mean": 0.15,
        "pool/current/adv_mean": -0.05,
      }),
    ];
    const md = advantageTable(
      new Map([
        ["full", full],
        ["without task advantage normalization", [arm("no-task-norm", 1, { db: 1 }, { db: 1 })]],
      ]),
    );
    const lines = md.split("\n");
    expect(lines[0]).toContain("db: estimator mean ± std → trained mean ± std");
    // arms without statistics (runs recorded before them) are left out rather than shown as zeros
    expect(lines).toHaveLength(3);
    expect(lines[2]).toBe("| full | −0.200 ± 0.500 → +0.000 ± 1.000 | 20.0% | +0.200 / −0.050 |");
    expect(advantageTable(new Map([["full", [arm("multi", 1, { db: 1 }, { db: 1 })]]]))).toMatch(
      /no advantage statistics/,
    );
  });
});
