/**
 * `npm run learning -- [--seeds 3] [--tables 3,4,6] [--config configs/learning.yaml]
 *   [--ablation-config <file>] [--out runs/learning] [--jobs 1] [--set path=value ...] [--dry-run]`
 *
 * Reproduces the learning tables (the reference's Tables 3, 4 and 6 in miniature): runs every arm
 * the chosen tables need, once per seed, each as `agentrl train` in sync mode (the seeded mode:
 * the same seed gives the same result whatever the machine's load, docs/pipeline.md), then prints
 * the tables as markdown and writes them to `<out>/tables.md`. Each finished arm stores its result
 * (`<out>/<arm>/seed-<s>/result.json`: both closing evaluations with their per-instance outcomes);
 * a rerun skips those and reruns an arm that was killed mid-way from the start. `--jobs N` runs up
 * to N arms at once: the results do not change (each is seeded), only the wall time. An arm that
 * fails leaves the others running; the command then exits 1 naming it.
 *
 * Arms: `multi` (the config as it is: Table 3, and Table 4's multi-task run);
 * `demonstrations-alone` (Table 3's control when the config imitates expert episodes: the same run
 * with the RL loss left out, so the table says what RL added beside the imitation); per task
 * `single-<task>-steps` (that task alone, the same steps) and `single-<task>-data` (that task
 * alone, the steps that give it the data it had in the mix); `ablation-full` (only when the
 * ablation config differs), `no-cross-policy`, `no-task-norm` (Table 6).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { z } from "zod";
import { readMetrics } from "../cli/report/report.ts";
import { SUPERVISOR_PID_ENV } from "../cli/supervisorWatch.ts";
import { loadTaskModule } from "../env-images/registry.ts";
import { readScriptArgs, validateScriptArgs } from "../shared/commandLine.ts";
import { loadConfig } from "../shared/config/index.ts";
import { ValidationError } from "../shared/errors.ts";
import { EvalReport } from "../shared/protocol/metrics.ts";
import {
  ArmResult,
  advantageSummary,
  advantageTable,
  droppedMembersOf,
  endingTable,
  type KindOf,
  kindTable,
  seededNote,
  table3,
  table4,
  table6,
} from "./learningTables.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

const Flags = z.object({
  seeds: z.coerce.number().int().min(1).max(20),
  tables: z
    .string()
    .regex(/^[346](,[346])*$/, "a comma-separated list of 3, 4 and 6")
    .transform((s) => new Set(s.split(",").map(Number))),
  config: z.string().min(1),
  "ablation-config": z.string().min(1).optional(),
  out: z.string().min(1),
  jobs: z.coerce.number().int().min(1).max(8),
  set: z.array(z.string().regex(/^[A-Za-z0-9_.[\]]+=/, "path=value")),
  "dry-run": z.boolean(),
});

interface Arm {
  readonly name: string;
  readonly config: string;
  /** `--set` overrides that make this arm, applied after the user's (so the arm's own settings hold). */
  readonly sets: readonly string[];
}

const SCRIPT = {
  command: "npm run learning --",
  usage:
    "[--seeds 1..20] [--tables 3,4,6] [--config FILE] [--ablation-config FILE] [--out DIR] [--jobs 1..8] [--set path=value ...] [--dry-run]",
};

function parseFlags(argv: readonly string[]): z.infer<typeof Flags> {
  const { values } = readScriptArgs(
    SCRIPT,
    {
      options: {
        seeds: { type: "string", default: "3" },
        tables: { type: "string", default: "3,4,6" },
        config: { type: "string", default: "configs/learning.yaml" },
        "ablation-config": { type: "string" },
        out: { type: "string", default: "runs/learning" },
        jobs: { type: "string", default: "1" },
        set: { type: "string", multiple: true, default: [] },
        "dry-run": { type: "boolean", default: false },
      },
    },
    argv,
  );
  return validateScriptArgs(SCRIPT, Flags, values);
}

/** The arms the chosen tables need, from the configs' task mixes and step counts. */
async function armsFor(flags: z.infer<typeof Flags>): Promise<Arm[]> {
  // With the user's --set applied: an arm's mix and step count derive from what the user runs
  // (`--set trainer.maxSteps=80` gives the equal-data arms 40 of them, not 20 then overridden to 80).
  const config = await loadConfig(flags.config, { overrides: flags.set });
  const ablation = flags["ablation-config"] ?? flags.config;
  const separateAblation = resolve(ablation) !== resolve(flags.config);
  // Its arms run with the user's overrides too: a file or a field it cannot take is named now, before any arm starts.
  if (separateAblation)
    await loadConfig(ablation, { overrides: flags.set }).catch((error: unknown) => {
      if (!(error instanceof ValidationError)) throw error;
      throw new ValidationError(
        error.what,
        error.issues.map((issue) => ({
          path: issue.path ? `${ablation}: ${issue.path}` : ablation,
          message: issue.message,
        })),
      );
    });
  // Tables 3 and 4 read the config as it is, and so does Table 6 when it ablates that config.
  const arms: Arm[] =
    flags.tables.has(3) || flags.tables.has(4) || !separateAblation
      ? [{ name: "multi", config: flags.config, sets: [] }]
      : [];
  // With demonstrations in the loss, Table 3's gain is RL's and the imitation's together: the control tells them apart.
  const imitation = config.trainer.demonstrations;
  if (flags.tables.has(3) && imitation.coef > 0 && !imitation.alone)
    arms.push({ name: "demonstrations-alone", config: flags.config, sets: ["trainer.demonstrations.alone=true"] });
  if (flags.tables.has(4)) {
    const mix = config.tasks.mix;
    const totalWeight = mix.reduce((s, t) => s + t.weight, 0);
    for (const task of mix) {
      const alone = `tasks.mix=${JSON.stringify([{ ...task, weight: 1 }])}`;
      const dataSteps = Math.max(1, Math.round((config.trainer.maxSteps * task.weight) / totalWeight));
      arms.push({ name: `single-${task.name}-steps`, config: flags.config, sets: [alone] });
      arms.push({
        name: `single-${task.name}-data`,
        config: flags.config,
        sets: [alone, `trainer.maxSteps=${dataSteps}`],
      });
    }
  }
  if (flags.tables.has(6)) {
    if (separateAblation) arms.push({ name: "ablation-full", config: ablation, sets: [] });
    arms.push({ name: "no-cross-policy", config: ablation, sets: ["rollout.crossPolicy.enabled=false"] });
    arms.push({ name: "no-task-norm", config: ablation, sets: ["trainer.taskAdvantageNorm=false"] });
  }
  return arms;
}

function resultFile(out: string, arm: string, seed: number): string {
  return join(out, arm, `seed-${seed}`, "result.json");
}

async function readResult(file: string): Promise<ArmResult | undefined> {
  if (!existsSync(file)) return undefined;
  const parsed = ArmResult.safeParse(JSON.parse(readFileSync(file, "utf8")));
  if (!parsed.success) return undefined;
  // A result stored before droppedMembers was kept: count them from its run's metrics when they are there.
  const metricsFile = join(dirname(file), "metrics.jsonl");
  if (parsed.data.droppedMembers !== undefined || !existsSync(metricsFile)) return parsed.data;
  const steps = await readMetrics(metricsFile);
  return { ...parsed.data, droppedMembers: droppedMembersOf(steps.map((step) => step.metrics)) };
}

/**
 * Stopping this command stops the arms it runs (agentrl train closes its roles), and it exits once
 * they have, so no run is left training with nobody to read its result; a rerun restarts them.
 */
const running = new Set<ChildProcess>();
let stoppedBy: NodeJS.Signals | undefined;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    stoppedBy = signal;
    if (running.size === 0) process.exit(1);
    for (const child of running) child.kill(signal);
  });
}

/**
 * The overrides of one arm at one seed, in the order they apply: the user's, then the arm's own
 * (its mix, steps or ablation, derived from the config with the user's applied), then the seed and
 * the seeded mode, which every arm must keep.
 */
function armSets(arm: Arm, seed: number, user: readonly string[]): string[] {
  return [...user, ...arm.sets, `seed=${seed}`, "trainer.mode=sync"];
}

/** Runs one arm at one seed as `agentrl train`, then stores its result for the tables to read. */
async function runArm(arm: Arm, seed: number, flags: z.infer<typeof Flags>): Promise<void> {
  const runDir = join(flags.out, arm.name, `seed-${seed}`);
  // A run killed mid-way restarts from scratch: its store may hold steps of another timing.
  rmSync(runDir, { recursive: true, force: true });
  mkdirSync(runDir, { recursive: true });
  const sets = armSets(arm, seed, flags.set);
  const args = [
    "bin/agentrl.mjs",
    "train",
    "-c",
    arm.config,
    ...sets.flatMap((s) => ["--set", s]),
    "--run-dir",
    runDir,
  ];
  console.error(`[learning] ${arm.name} seed ${seed}: node ${args.join(" ")}`);
  const started = Date.now();
  const code = await new Promise<number>((done) => {
    // The run's own output goes to stderr: stdout is the tables alone.
    // the arm stops if this command is killed without stopping it (cli/supervisorWatch.ts)
    const env = { ...process.env, [SUPERVISOR_PID_ENV]: String(process.pid) };
    const child = spawn(process.execPath, args, { cwd: root, env, stdio: ["ignore", 2, 2] });
    running.add(child);
    child.on("exit", (status) => {
      running.delete(child);
      if (!stoppedBy) return done(status ?? 1);
      console.error(`[learning] ${arm.name} seed ${seed}: stopped by ${stoppedBy}; a rerun restarts this arm`);
      if (running.size === 0) process.exit(1);
    });
  });
  if (code !== 0) throw new Error(`${arm.name} seed ${seed}: agentrl train exited ${code}; see ${runDir}/logs`);
  const reports = readdirSync(runDir)
    .filter((f) => /^eval-.*\.json$/.test(f))
    .map((f) => EvalReport.parse(JSON.parse(readFileSync(join(runDir, f), "utf8"))));
  const base = reports.find((r) => r.policy.includes("(base)"));
  const newest = reports.find((r) => !r.policy.includes("(base)"));
  if (!base || !newest)
    throw new Error(`${arm.name} seed ${seed}: the run left no closing evaluation of both base and newest`);
  const steps = await readMetrics(join(runDir, "metrics.jsonl"));
  const result: ArmResult = {
    schemaVersion: 1,
    arm: arm.name,
    seed,
    config: arm.config,
    sets,
    wallSeconds: (Date.now() - started) / 1000,
    base,
    newest,
    advantages: advantageSummary(steps.map((step) => step.metrics)),
    droppedMembers: droppedMembersOf(steps.map((step) => step.metrics)),
  };
  writeFileSync(resultFile(flags.out, arm.name, seed), `${JSON.stringify(result)}\n`);
}

/** Each evaluated task's own `categoryOf` (its instance kinds), from the task modules. */
async function kindsOfTasks(results: readonly ArmResult[]): Promise<KindOf> {
  const names = new Set(results.flatMap((r) => r.base.tasks.map((t) => t.task)));
  const kinds = new Map<string, (index: number) => string | undefined>();
  for (const name of names) {
    const { task } = await loadTaskModule(name);
    if (task.categoryOf) kinds.set(name, task.categoryOf.bind(task));
  }
  return (task, index) => kinds.get(task)?.(index);
}

/** What RL changed against the base: successes by instance kind, and how the episodes ended. */
async function rlAgainstBase(label: string, arm: readonly ArmResult[]): Promise<string[]> {
  const kinds = kindTable(arm, await kindsOfTasks(arm));
  return [
    ...(kinds === "" ? [] : [`### ${label}: what moved, by instance kind\n\n${kinds}`]),
    `### ${label}: how the test episodes ended\n\n${endingTable(arm)}`,
  ];
}

const flags = parseFlags(process.argv.slice(2));
const arms = await armsFor(flags).catch((error: unknown) => {
  // a config the arms cannot run, e.g. a --set that does not fit it: say which field, before any arm starts
  if (!(error instanceof ValidationError)) throw error;
  for (const issue of error.issues) console.error(`${issue.path || flags.config}: ${issue.message}`);
  process.exit(2);
});
const seeds = Array.from({ length: flags.seeds }, (_, i) => i + 1);
const queue: { arm: Arm; seed: number }[] = [];
for (const arm of arms) {
  for (const seed of seeds) {
    if (await readResult(resultFile(flags.out, arm.name, seed))) {
      console.error(`[learning] ${arm.name} seed ${seed}: done before, skipped`);
    } else if (flags["dry-run"]) {
      console.error(
        `[learning] ${arm.name} seed ${seed}: would run ${arm.config} ${armSets(arm, seed, flags.set).join(" ")}`,
      );
    } else {
      queue.push({ arm, seed });
    }
  }
}
const failures: string[] = [];
const worker = async () => {
  for (let next = queue.shift(); next && !stoppedBy; next = queue.shift()) {
    try {
      await runArm(next.arm, next.seed, flags);
    } catch (error) {
      console.error(`[learning] ${(error as Error).message}`);
      failures.push(`${next.arm.name} seed ${next.seed}`);
    }
  }
};
await Promise.all(Array.from({ length: flags.jobs }, worker));
if (failures.length > 0) {
  console.error(`[learning] failed: ${failures.join(", ")}; the finished arms are kept, a rerun runs the rest`);
  process.exit(1);
}
// The tables in arm and seed order, whatever order the arms finished in.
const results = new Map<string, ArmResult[]>();
for (const arm of arms) {
  for (const seed of seeds) {
    const result = await readResult(resultFile(flags.out, arm.name, seed));
    if (result) results.set(arm.name, [...(results.get(arm.name) ?? []), result]);
  }
}

const of = (name: string) => results.get(name) ?? [];
const sections: string[] = [];
if (of("multi").length > 0 && flags.tables.has(3)) {
  sections.push(`### Table 3: RL from the base (greedy test success, %)\n\n${table3(of("multi"))}`);
  sections.push(...(await rlAgainstBase("Table 3", of("multi"))));
  if (of("demonstrations-alone").length > 0)
    sections.push(
      `### Table 3's control: the demonstrations without RL (greedy test success, %)\n\n${table6(
        of("multi"),
        new Map([["the demonstrations alone (RL loss left out)", of("demonstrations-alone")]]),
        { full: "RL with demonstrations", ablation: "alone" },
      )}`,
    );
}
if (of("multi").length > 0 && flags.tables.has(4)) {
  const singles = new Map<string, ArmResult[]>();
  for (const [name, list] of results) {
    const match = /^single-(.+)-(steps|data)$/.exec(name);
    if (match) singles.set(`${match[1]}@${match[2]}`, list);
  }
  sections.push(
    `### Table 4: multi-task against single-task (greedy test success, %)\n\n${table4(of("multi"), singles)}`,
  );
}
const full = of(results.has("ablation-full") ? "ablation-full" : "multi");
if (full.length > 0 && flags.tables.has(6)) {
  const ablations = new Map([
    ["without cross-policy sampling", of("no-cross-policy")],
    ["without task advantage normalization", of("no-task-norm")],
  ]);
  sections.push(`### Table 6: ablations (greedy test success, %)\n\n${table6(full, ablations)}`);
  sections.push(
    `### Table 6: what each mechanism changed (token advantages, mean over steps and seeds)\n\n${advantageTable(new Map([["full", full], ...ablations]))}`,
  );
  // On its own config, the full arm is RL from that config's base: what it moved, as Table 3 shows it.
  if (results.has("ablation-full"))
    sections.push(
      `### Table 6's full arm: RL from the base (greedy test success, %)\n\n${table3(full)}`,
      ...(await rlAgainstBase("Table 6's full arm", full)),
    );
}
const compute = [...results.values()].flat().reduce((s, r) => s + r.wallSeconds, 0);
const runs = [...results.values()].flat().length;
sections.push(
  `${runs} runs, ${(compute / 3600).toFixed(2)} h of wall time in all (each run's own time). ${seededNote([...results.values()].flat())}`,
);
const markdown = `${sections.join("\n\n")}\n`;
if (!flags["dry-run"]) {
  mkdirSync(flags.out, { recursive: true });
  writeFileSync(join(flags.out, "tables.md"), markdown);
}
process.stdout.write(markdown);
