import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runProcess } from "../support/cli.ts";
import { processesNaming } from "../support/processes.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * `npm run learning` end to end, shrunk to one seed of Table 3's arm (one sync step, one held-out
 * instance per task): it runs the arm, stores its result, prints the table; a rerun runs nothing
 * and prints the same table; a run folder left by a killed run is started again from scratch; stopping
 * the command stops the arm it runs.
 */

const SCRIPT = fileURLToPath(new URL("../../scripts/learning.ts", import.meta.url));
const TSX = fileURLToPath(new URL("../../node_modules/.bin/tsx", import.meta.url));
const SMALL = [
  "trainer.maxSteps=1",
  "trainer.batchSize=2",
  "rollout.groupSize=2",
  "rollout.concurrency=8",
  "evaluation.instances=1",
].flatMap((s) => ["--set", s]);

/**
 * A closing evaluation as an arm stores it: on each task `solved` of `episodes` instances succeed
 * (the first ones) and `invalid` end with a failed validation (the last ones), one episode each.
 */
function evalReport(policy: string, tasks: readonly string[], episodes: number, solved: number, invalid = 0) {
  const statusOf = (index: number) => (index >= episodes - invalid ? "agent validation failed" : "completed");
  return {
    schemaVersion: 1,
    policy,
    split: "test",
    createdAt: "2026-01-01T00:00:00Z",
    tasks: tasks.map((task) => ({
      task,
      episodes,
      success: solved / episodes,
      meanReward: solved / episodes,
      meanTurns: 2,
      statuses:
        invalid > 0 ? { completed: episodes - invalid, "agent validation failed": invalid } : { completed: episodes },
    })),
    averageSuccess: solved / episodes,
    outcomes: tasks.flatMap((task) =>
      Array.from({ length: episodes }, (_, index) => ({
        task,
        index,
        sample: 0,
        status: statusOf(index),
        success: index < solved ? 1 : 0,
      })),
    ),
  };
}

describe("npm run learning", () => {
  it("runs each arm once (two at a time), stores it, prints Table 3, and skips it on a rerun", async () => {
    const out = tempDir("agentrl-learning-");
    // What a run killed mid-way leaves: a folder without result.json.
    mkdirSync(join(out, "multi", "seed-1"), { recursive: true });
    writeFileSync(join(out, "multi", "seed-1", "leftover"), "killed");
    const args = [SCRIPT, "--tables", "3", "--seeds", "2", "--jobs", "2", "--out", out, ...SMALL];
    const first = await runProcess(TSX, args, { timeoutMs: 280_000 });
    expect(first.status, first.stderr).toBe(0);
    expect(existsSync(join(out, "multi", "seed-1", "leftover"))).toBe(false);
    expect(existsSync(join(out, "multi", "seed-1", "result.json"))).toBe(true);
    expect(existsSync(join(out, "multi", "seed-2", "result.json"))).toBe(true);
    // The arm keeps the advantage statistics its steps recorded (under each line's `metrics`).
    const result = JSON.parse(readFileSync(join(out, "multi", "seed-1", "result.json"), "utf8")) as {
      advantages: Record<string, number>;
      droppedMembers: number;
    };
    expect(result.droppedMembers).toBe(0);
    const recorded = new Set(
      readFileSync(join(out, "multi", "seed-1", "metrics.jsonl"), "utf8")
        .split("\n")
        .filter((line) => line.trim() !== "")
        .flatMap((line) => Object.keys((JSON.parse(line) as { metrics: Record<string, number> }).metrics))
        .filter((key) => /^(task\/[^/]+\/adv_|pool\/)/.test(key)),
    );
    expect(Object.keys(result.advantages).sort()).toEqual([...recorded].sort());
    expect(first.stdout).toContain("### Table 3");
    // How the base's and RL's test episodes ended, per task, after what moved by kind.
    const endings = first.stdout.slice(first.stdout.indexOf("### Table 3: how the test episodes ended"));
    for (const task of ["db", "os"])
      expect(endings).toMatch(new RegExp(`\\n\\| ${task} \\| [a-z ]+ \\| \\d+ \\| \\d+ \\|`));
    // One row per seed, in seed order whichever finished first.
    expect(first.stdout).toMatch(
      /\n\| 1 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [+−][^\n]*\n\| 2 \| [\d.]+ /,
    );
    expect(first.stdout).toMatch(
      /2 runs, [\d.]+ h of wall time in all \(each run's own time\)\. No arm dropped a group member: every step trained the batch its seed drew\./,
    );

    const again = await runProcess(TSX, args, { timeoutMs: 60_000 });
    expect(again.status, again.stderr).toBe(0);
    expect(again.stderr).toContain("multi seed 1: done before, skipped");
    expect(again.stderr).toContain("multi seed 2: done before, skipped");
    expect(again.stdout).toBe(first.stdout);
  }, 360_000);

  it("stops the arms it runs when it is stopped, leaving no result and no process behind", async () => {
    const out = tempDir("agentrl-learning-stop-");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", SCRIPT, "--tables", "3", "--seeds", "2", "--jobs", "2", "--out", out, ...SMALL],
      { cwd: fileURLToPath(new URL("../..", import.meta.url)), stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
    // The arm is under way once its roles are up.
    const started = Date.now();
    while (!stderr.includes("waiting for the first batch") && Date.now() - started < 120_000)
      await new Promise((r) => setTimeout(r, 200));
    expect(stderr, stderr).toContain("waiting for the first batch");
    child.kill("SIGTERM");
    expect(await exited, stderr).toBe(1);
    for (const seed of [1, 2]) {
      expect(stderr).toContain(`multi seed ${seed}: stopped by SIGTERM; a rerun restarts this arm`);
      expect(existsSync(join(out, "multi", `seed-${seed}`, "result.json"))).toBe(false);
    }
    expect(processesNaming(out)).toEqual([]);
  }, 180_000);

  it("Table 6 on its own config prints its full arm against that config's base, from the stored result", async () => {
    const out = tempDir("agentrl-learning-shop-");
    const report = (policy: string, invalid: number) => evalReport(policy, ["db", "os", "webshop"], 4, 1, invalid);
    const stored = {
      schemaVersion: 1,
      arm: "ablation-full",
      seed: 1,
      config: "configs/learning-shop.yaml",
      sets: ["seed=1", "trainer.mode=sync"],
      wallSeconds: 60,
      base: report("v0 (base)", 3),
      newest: report("v40", 1),
    };
    mkdirSync(join(out, "ablation-full", "seed-1"), { recursive: true });
    writeFileSync(join(out, "ablation-full", "seed-1", "result.json"), JSON.stringify(stored));
    const dry = await runProcess(TSX, [
      SCRIPT,
      ...["--tables", "6", "--seeds", "1", "--out", out, "--dry-run"],
      ...["--ablation-config", "configs/learning-shop.yaml"],
    ]);
    expect(dry.status, dry.stderr).toBe(0);
    expect(dry.stderr).toContain("ablation-full seed 1: done before, skipped");
    expect(dry.stdout).toContain("### Table 6's full arm: RL from the base (greedy test success, %)");
    expect(dry.stdout).toMatch(/\n\| 1 \| 25\.0 \| 25\.0 \| 25\.0 \| 25\.0 \| 25\.0 \| 25\.0 \| 25\.0 \| 25\.0 \| /);
    const endings = dry.stdout.slice(dry.stdout.indexOf("### Table 6's full arm: how the test episodes ended"));
    for (const task of ["db", "os", "webshop"])
      expect(endings).toContain(`| ${task} | agent validation failed | 3 | 1 |`);
  });

  it("with demonstrations in the config, Table 3 comes with its control: the same run without the RL loss", async () => {
    const out = tempDir("agentrl-learning-control-");
    const report = (policy: string, solved: number) => evalReport(policy, ["db", "os"], 8, solved);
    const stored = (arm: string, solved: number) => {
      mkdirSync(join(out, arm, "seed-1"), { recursive: true });
      const result = {
        ...{ schemaVersion: 1, arm, seed: 1, config: "configs/learning.yaml", sets: [], wallSeconds: 60 },
        ...{ base: report("v0 (base)", 2), newest: report("v40", solved) },
      };
      writeFileSync(join(out, arm, "seed-1", "result.json"), JSON.stringify(result));
    };
    const demonstrations = ["--set", "trainer.demonstrations.coef=1"];
    const table3 = (...flags: string[]) => runProcess(TSX, [SCRIPT, ...["--tables", "3", "--seeds", "1"], ...flags]);
    const plan = await table3("--out", out, "--dry-run", ...demonstrations);
    expect(plan.status, plan.stderr).toBe(0);
    const planned = [...plan.stderr.matchAll(/\] (\S+) seed 1: would run \S+ (.*)/g)].map((m) => `${m[1]}: ${m[2]}`);
    expect(planned).toEqual([
      "multi: trainer.demonstrations.coef=1 seed=1 trainer.mode=sync",
      "demonstrations-alone: trainer.demonstrations.coef=1 trainer.demonstrations.alone=true seed=1 trainer.mode=sync",
    ]);
    // without demonstrations there is nothing to tell apart, and a run that is itself the control has none
    for (const sets of [[], [...demonstrations, "--set", "trainer.demonstrations.alone=true"]]) {
      const plain = await table3("--out", out, "--dry-run", ...sets);
      expect(plain.stderr).not.toContain("demonstrations-alone");
    }
    stored("multi", 4);
    stored("demonstrations-alone", 3);
    const tables = await table3("--out", out, ...demonstrations);
    expect(tables.status, tables.stderr).toBe(0);
    expect(tables.stderr).toContain("demonstrations-alone seed 1: done before, skipped");
    const control = tables.stdout.slice(tables.stdout.indexOf("### Table 3's control"));
    expect(control).toMatch(/^### Table 3's control: the demonstrations without RL/);
    expect(control).toContain("| run | db | os | avg | alone − RL with demonstrations avg, per seed (paired 95%) |");
    expect(control).toContain("| RL with demonstrations (base avg 25.0) | 50.0 | 50.0 | 50.0 | – |");
    // one instance of eight fewer on each task: −12.5 points, paired instance by instance
    expect(control).toMatch(
      /\| the demonstrations alone \(RL loss left out\) \| 37\.5 \| 37\.5 \| 37\.5 \| s1 −12\.5 \(−\d/,
    );
  });

  it("refuses bad flags, saying what is allowed", async () => {
    const seeds = await runProcess(TSX, [SCRIPT, "--seeds", "0"]);
    expect(seeds.status).toBe(2);
    expect(seeds.stderr).toContain("--seeds");
    const tables = await runProcess(TSX, [SCRIPT, "--tables", "3,5"]);
    expect(tables.status).toBe(2);
    expect(tables.stderr).toContain("a comma-separated list of 3, 4 and 6");
    const jobs = await runProcess(TSX, [SCRIPT, "--jobs", "0"]);
    expect(jobs.status).toBe(2);
    expect(jobs.stderr).toContain("--jobs");
    const unknown = await runProcess(TSX, [SCRIPT, "--sedes", "3"]);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("Unknown option '--sedes'");
    expect(unknown.stderr).toContain("usage: npm run learning -- [--seeds 1..20]");
    const help = await runProcess(TSX, [SCRIPT, "--help"]);
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run learning -- \[--seeds 1..20\] \[--tables 3,4,6\]/);
  });

  it("--dry-run names every arm with the overrides it would run with, and runs nothing", async () => {
    const out = join(tempDir("agentrl-learning-"), "never");
    const dry = await runProcess(TSX, [
      SCRIPT,
      ...["--tables", "4,6", "--seeds", "2", "--out", out, "--dry-run"],
      ...["--set", "trainer.estimator=reinforce++", "--set", "trainer.skipUniformGroups=false"],
      ...["--set", "trainer.maxSteps=80"],
      ...["--set", "tasks.mix.1.trainInstances=64", "--set", "trainer.taskAdvantageNorm=true"],
    ]);
    expect(dry.status, dry.stderr).toBe(0);
    // multi, two single-task arms per task (db, os), the two ablations; each at two seeds.
    expect(dry.stderr.match(/would run/g)).toHaveLength(14);
    // the user's overrides first, then the arm's own, so the ablation holds against the user's
    expect(dry.stderr).toMatch(
      /no-task-norm seed 2: would run \S+ trainer\.estimator=reinforce\+\+ .*trainer\.taskAdvantageNorm=true trainer\.taskAdvantageNorm=false seed=2 trainer\.mode=sync/,
    );
    // equal data is half the user's 80 steps, and the task alone keeps the user's change to its entry
    expect(dry.stderr).toMatch(/single-db-data seed 1: would run .*trainer\.maxSteps=80 .*trainer\.maxSteps=40 seed=1/);
    expect(dry.stderr).toMatch(
      /single-os-steps seed 1: would run .*tasks\.mix=\[\{"name":"os",[^\]]*"trainInstances":64/,
    );
    expect(dry.stderr).toMatch(
      /single-db-steps seed 1: would run .*tasks\.mix=\[\{"name":"db",[^\]]*"trainInstances":10000/,
    );
    expect(existsSync(out)).toBe(false);
    // Table 6 alone on a workload of its own: its full arm and the two ablations of that config, no Table 3 arm
    const shop = await runProcess(TSX, [
      SCRIPT,
      ...["--tables", "6", "--seeds", "1", "--out", out, "--dry-run"],
      ...["--ablation-config", "configs/learning-shop.yaml"],
    ]);
    expect(shop.status, shop.stderr).toBe(0);
    const planned = [...shop.stderr.matchAll(/\] (\S+) seed 1: would run (\S+)/g)].map((m) => `${m[1]} ${m[2]}`);
    expect(planned).toEqual(
      ["ablation-full", "no-cross-policy", "no-task-norm"].map((arm) => `${arm} configs/learning-shop.yaml`),
    );
    // a missing ablation config is named before any arm starts
    const missing = await runProcess(TSX, [
      SCRIPT,
      ...["--tables", "6", "--out", out, "--dry-run"],
      ...["--ablation-config", "nope.yaml"],
    ]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/^nope\.yaml: cannot read nope\.yaml/m);
    // a --set the config cannot take is named before any arm starts
    const bad = await runProcess(TSX, [SCRIPT, "--out", out, "--dry-run", "--set", "trainer.estimator=reinforce++"]);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/^trainer\.skipUniformGroups: needs a group baseline/m);
    const index = await runProcess(TSX, [SCRIPT, "--out", out, "--dry-run", "--set", "tasks.mix.2.weight=1"]);
    expect(index.status).toBe(2);
    expect(index.stderr).toContain("tasks.mix.2: tasks.mix is a list of 2: an index from 0 to 1 picks an entry");
  });
});
