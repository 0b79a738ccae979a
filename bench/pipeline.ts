/**
 * `npm run bench:pipeline` — the async pipeline against sync (generate a batch, train, repeat) on
 * the same workload, side by side in one run. The workload is the `latency` task (seeded lognormal
 * environment delays, the same instances and delays in both modes) with a tiny model, so what is
 * measured is the overlap of generation and training, not model speed. Every role runs as a child
 * process through runPipeline, exactly as `agentrl train` does.
 *
 * Printed per mode, over the steady state (from the end of trainer step 2 to the end of the last
 * step, so start-up and the first batch, which nothing can overlap, are left out):
 * - trajectories/s trained in that window (the headline), reaching the trainer, and end to end;
 * - trainer busy fraction: time inside train steps (`time/step_seconds`) over the window;
 * - stage times per step: train = mean `time/step_seconds`; generation = the span of a sync batch;
 * then the upper bound on async trajectories/s and on the speedup (bench/pipelineBound.ts, which
 * derives it and states its assumptions) beside the measured speedup. The last line is the JSON
 * summary (bench/summary.ts `PipelineSummary`).
 *
 * Workloads: `--workload default` (lognormal median 400 ms, sigma 1, 2 groups of 4 per step) and
 * `--workload longtail` (median 2 s, sigma 1.5, cap 60 s, 8 groups of 4 per step: sync waits for
 * the slowest of 8 heavy-tailed groups every step, async does not; env time long against a train
 * step, as in agentic tasks); any flag below overrides the preset.
 * Flags: --base DIR (reuse a base checkpoint folder holding policies/v0/), --steps N (trainer
 * steps per mode), --median-ms X, --sigma S, --max-ms X (env delay shape and cap), --probes K (tool
 * calls per episode), --batch B (groups per step), --group-size n, --window-batches K (the async
 * feeder's window, rollout.maxInFlightBatches), --trainer-nice N (niceness added to the trainer in
 * async mode; cli/launch/priority.ts), --compare-nice (also run async with every role at the same
 * niceness), --keep (keep the temp folder). Bounded: each mode is aborted after --mode-timeout-s.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pino from "pino";
import { z } from "zod";
import { runPipeline } from "../cli/launch/pipeline.ts";
import { EQUAL_NICENESS, RoleNiceness } from "../cli/launch/priority.ts";
import { AGENTRL_BIN } from "../cli/launch/supervisor.ts";
import { readMetrics } from "../cli/report/report.ts";
import { LATENCY_ENV, LatencyOptions } from "../env-images/latency/index.ts";
import { inFlightGroupCap } from "../functions/feeder/feeder.ts";
import { abortOnStopSignals, readScriptArgs } from "../shared/commandLine.ts";
import { type ExperimentConfig, parseConfig } from "../shared/config/index.ts";
import { createLogger } from "../shared/log.ts";
import type { StepMetrics } from "../shared/protocol/metrics.ts";
import { LocalObjectStore } from "../shared/transport/local.ts";
import { intFlag } from "./flags.ts";
import { boundReport, type ModeFigures, type PipelineShape } from "./pipelineBound.ts";
import { figure, load1, PipelineSummary, printSummary } from "./summary.ts";

const benchStarted = performance.now();
const SCRIPT = {
  command: "npm run bench:pipeline --",
  usage:
    "[--workload default|longtail] [--steps N] [--batch N] [--group-size N] [--window-batches N] [--median-ms MS] [--sigma S] [--max-ms MS] [--probes N] [--base DIR] [--trainer-nice 0..19] [--compare-nice] [--mode-timeout-s S] [--keep]",
};
const { values: flags } = readScriptArgs(SCRIPT, {
  options: {
    base: { type: "string" },
    workload: { type: "string", default: "default" },
    steps: { type: "string" },
    "median-ms": { type: "string" },
    sigma: { type: "string" },
    "max-ms": { type: "string" },
    probes: { type: "string" },
    batch: { type: "string" },
    "group-size": { type: "string" },
    "window-batches": { type: "string" },
    "trainer-nice": { type: "string" },
    "compare-nice": { type: "boolean", default: false },
    "mode-timeout-s": { type: "string", default: "600" },
    keep: { type: "boolean", default: false },
  },
});

/** Flag values of each workload; a flag given on the command line wins. */
const WORKLOADS = {
  default: { steps: 10, medianMs: 400, sigma: 1, maxMs: 15_000, probes: 1, batch: 2 },
  longtail: { steps: 10, medianMs: 2000, sigma: 1.5, maxMs: 60_000, probes: 1, batch: 8 },
} as const;
const workloadName = flags.workload;
if (workloadName !== "default" && workloadName !== "longtail") {
  console.error(`--workload must be default or longtail, got "${workloadName}"`);
  process.exit(2);
}
const preset = WORKLOADS[workloadName];

const steps = intFlag("steps", flags.steps ?? String(preset.steps), 3);
const batch = intFlag("batch", flags.batch ?? String(preset.batch), 1);
const groupSize = intFlag("group-size", flags["group-size"] ?? "4", 2);
const windowBatches = intFlag("window-batches", flags["window-batches"] ?? "2", 1);
const trainerNice = intFlag("trainer-nice", flags["trainer-nice"] ?? String(RoleNiceness.parse({}).trainer), 0, 19);
const modeTimeoutS = intFlag("mode-timeout-s", flags["mode-timeout-s"], 30);
const latencyParsed = LatencyOptions.safeParse({
  medianMs: Number(flags["median-ms"] ?? preset.medianMs),
  sigma: Number(flags.sigma ?? preset.sigma),
  maxMs: Number(flags["max-ms"] ?? preset.maxMs),
  probesPerEpisode: Number(flags.probes ?? preset.probes),
});
if (!latencyParsed.success) {
  const issue = latencyParsed.error.issues[0];
  console.error(`bad latency flag ${String(issue?.path[0])}: ${issue?.message}`);
  process.exit(2);
}
const latency = latencyParsed.data;
// the env worker is a child process: it reads the delay shape from the environment it inherits
for (const [key, name] of Object.entries(LATENCY_ENV)) process.env[name] = String(latency[key as keyof LatencyOptions]);

/** A tiny model: the bench measures pipeline overlap, not model speed. */
const TINY_MODEL = { dModel: 64, layers: 2, heads: 4, kvHeads: 2, ffnHidden: 128, vocabSize: 512 } as const;

/** One pipeline run of the bench: a mode, and the roles' niceness in it. */
interface Run {
  readonly label: string;
  readonly mode: "async" | "sync";
  readonly niceness: RoleNiceness;
}

function workload(run: Run, slots: number): ExperimentConfig {
  return parseConfig({
    experimentId: `bench-pipeline-${run.label.replace(/[^a-z0-9]+/g, "-")}`,
    seed: 7,
    policy: { model: TINY_MODEL },
    tasks: { mix: [{ name: "latency", concurrency: slots }] },
    rollout: {
      groupSize,
      maxTurns: latency.probesPerEpisode + 2,
      maxTokensPerTurn: 64,
      // a cool sampler keeps the tiny model's tool calls well-formed; guesses still vary, so rewards do
      temperature: 0.4,
      workers: 1,
      concurrency: slots,
      maxInFlightBatches: windowBatches,
      crossPolicy: { enabled: false },
    },
    trainer: { mode: run.mode, batchSize: batch, maxSteps: steps, warmupFactor: 1, checkpointEvery: 1 },
    // Throughput only: no closing evaluation.
    evaluation: { instances: 0 },
  });
}

/** The async feeder's window in episodes; rollout slots are sized to it, so it is what binds. */
const windowEpisodes =
  inFlightGroupCap(workload({ label: "shape", mode: "async", niceness: EQUAL_NICENESS }, 1)) * groupSize;
const shape: PipelineShape = { groupSize, batchGroups: batch, windowEpisodes, slots: windowEpisodes };

/** `agentrl sft --out DIR` with the bench's tiny model: the base checkpoint both modes start from. */
function makeBase(dir: string): Promise<void> {
  const args = [AGENTRL_BIN, "sft", "--out", dir, "--tasks", "latency", "--episodes", "24", "--steps", "300"];
  args.push("--batch", "8", "--lr", "0.01", "--set", "tasks.mix=[{name: latency}]");
  for (const [key, value] of Object.entries(TINY_MODEL)) args.push("--set", `policy.model.${key}=${value}`);
  return new Promise((resolve, reject) => {
    // expert traces need no latency: the warm-up should not sleep through the delays
    const env = { ...process.env, [LATENCY_ENV.medianMs]: "0" };
    const child = spawn(process.execPath, args, { stdio: ["ignore", "ignore", "pipe"], env });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-4000);
    });
    child.on("error", reject);
    child.on("exit", (code) =>
      code === 0
        ? resolve()
        : reject(new Error(`sft exited with ${code}:\n${stderr.trim().split("\n").slice(-5).join("\n")}`)),
    );
  });
}

interface ModeResult {
  readonly run: Run;
  readonly wallSeconds: number;
  readonly records: StepMetrics[];
  readonly episodes: Episode[];
  readonly interrupted: boolean;
}

/** What the bench reads of a stored trajectory: when it ran. */
const EpisodeTimes = z.object({
  groupId: z.string(),
  status: z.string(),
  reward: z.number(),
  timings: z.object({
    startedAt: z.string(),
    finishedAt: z.string(),
    envMs: z.number().optional(),
    policyMs: z.number().optional(),
  }),
});
interface Episode {
  readonly groupId: string;
  readonly completed: boolean;
  readonly reward: number;
  readonly started: number;
  readonly finished: number;
  /** Time in environment calls and in policy calls (generation), ms. */
  readonly envMs: number;
  readonly policyMs: number;
}

async function readEpisodes(runDir: string): Promise<Episode[]> {
  const store = new LocalObjectStore(join(runDir, "transport", "objects", "trajectories"));
  const episodes: Episode[] = [];
  for (const info of await store.list("trajectories/")) {
    const text = await store.getText(info.key);
    const parsed = EpisodeTimes.safeParse(text === undefined ? undefined : JSON.parse(text));
    if (!parsed.success) continue;
    episodes.push({
      groupId: parsed.data.groupId,
      completed: parsed.data.status === "completed",
      reward: parsed.data.reward,
      started: Date.parse(parsed.data.timings.startedAt),
      finished: Date.parse(parsed.data.timings.finishedAt),
      envMs: parsed.data.timings.envMs ?? Number.NaN,
      policyMs: parsed.data.timings.policyMs ?? Number.NaN,
    });
  }
  return episodes;
}

async function runMode(run: Run, root: string, base: string, stopped: AbortSignal): Promise<ModeResult> {
  const name = run.label.replace(/[^a-z0-9]+/g, "-");
  const runDir = join(root, name);
  const log = createLogger(
    { role: "bench", mode: run.mode },
    pino.destination({ dest: join(root, `${name}-pipeline.log`), sync: true, mkdir: true }),
  );
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(new Error(`${run.label} exceeded ${modeTimeoutS} s`)), modeTimeoutS * 1000);
  const t0 = performance.now();
  try {
    const result = await runPipeline({
      config: workload(run, shape.slots),
      runDir,
      baseCheckpoint: base,
      signal: AbortSignal.any([stop.signal, stopped]),
      log,
      niceness: run.niceness,
    });
    return {
      run,
      wallSeconds: (performance.now() - t0) / 1000,
      records: await readMetrics(join(runDir, "metrics.jsonl")),
      episodes: await readEpisodes(runDir),
      interrupted: result.interrupted,
    };
  } finally {
    clearTimeout(timer);
  }
}

/** Trainer steps left out of the steady-state window: start-up and the first batch cannot overlap. */
const WARMUP_STEPS = 2;

interface Summary {
  readonly steps: number;
  readonly trajectories: number;
  /** Seconds from the end of step WARMUP_STEPS to the end of the last step. */
  readonly window: number;
  /** Trajectories trained per second in the window (the headline: what the bound bounds). */
  readonly trainedRate: number;
  /**
   * Trajectories that reached the trainer per second in the window: trained plus the change of
   * the trainer's buffer.
   */
  readonly steadyRate: number;
  /** Episodes finished per second in the window, whether trained yet or not. */
  readonly generatedRate: number;
  /** All trained trajectories over the whole runPipeline call (start-up and shutdown included). */
  readonly endToEndRate: number;
  /** Time inside train steps (`time/step_seconds`) over the window. */
  readonly busyFraction: number;
  /** Mean train step in the window. */
  readonly trainSeconds: number;
  /** Of the episodes finished in the window: mean time in env calls and in generation, s. */
  readonly envSeconds: number;
  readonly policySeconds: number;
  /** What the bound needs (bench/pipelineBound.ts). */
  readonly figures: ModeFigures;
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

function summarize(result: ModeResult): Summary | undefined {
  const r = result.records;
  const skip = Math.min(WARMUP_STEPS, r.length - 2);
  if (skip < 0) return undefined;
  const from = r[skip] as StepMetrics;
  const last = r[r.length - 1] as StepMetrics;
  const inWindow = r.slice(skip + 1);
  const window = last.elapsedSeconds - from.elapsedSeconds;
  const m = (s: StepMetrics, key: string) => s.metrics[key] ?? 0;
  const consumed = inWindow.reduce((sum, s) => sum + m(s, "rollout/trajectories"), 0);
  const arrived = consumed + m(last, "rollout/buffered") - m(from, "rollout/buffered");
  const trained = inWindow.reduce((sum, s) => sum + m(s, "time/step_seconds"), 0);
  const windowStart = Date.parse(from.time);
  const windowEnd = Date.parse(last.time);
  const inside = (t: number) => t > windowStart && t <= windowEnd;
  const finished = result.episodes.filter((e) => inside(e.finished));
  // a group's duration is its slowest member's; counted in the window when its last member finished there
  const members = new Map<string, Episode[]>();
  for (const e of result.episodes) members.set(e.groupId, [...(members.get(e.groupId) ?? []), e]);
  const groupSeconds: number[] = [];
  for (const group of members.values()) {
    if (group.length < groupSize || !inside(Math.max(...group.map((e) => e.finished)))) continue;
    groupSeconds.push(Math.max(...group.map((e) => e.finished - e.started)) / 1000);
  }
  // sync: batch i is generated after step i-1 published and before step i ends; its span is the
  // first start to the last finish of those episodes (meaningless in async, where batches overlap)
  const spans: number[] = [];
  for (let i = skip + 1; i < r.length; i++) {
    const after = Date.parse((r[i - 1] as StepMetrics).time);
    const until = Date.parse((r[i] as StepMetrics).time);
    const batchEpisodes = result.episodes.filter((e) => e.started >= after && e.finished <= until);
    if (batchEpisodes.length === 0) continue;
    spans.push(
      (Math.max(...batchEpisodes.map((e) => e.finished)) - Math.min(...batchEpisodes.map((e) => e.started))) / 1000,
    );
  }
  return {
    steps: r.length,
    trajectories: r.reduce((sum, s) => sum + m(s, "rollout/trajectories"), 0),
    window,
    trainedRate: consumed / window,
    steadyRate: arrived / window,
    generatedRate: finished.length / ((windowEnd - windowStart) / 1000),
    endToEndRate: r.reduce((sum, s) => sum + m(s, "rollout/trajectories"), 0) / result.wallSeconds,
    busyFraction: trained / window,
    trainSeconds: trained / inWindow.length,
    envSeconds: mean(finished.map((e) => e.envMs)) / 1000,
    policySeconds: mean(finished.map((e) => e.policyMs)) / 1000,
    figures: {
      rate: consumed / window,
      windowSeconds: window,
      episodeSeconds: finished.map((e) => (e.finished - e.started) / 1000),
      groupSeconds,
      steps: inWindow.map((s) => ({
        seconds: m(s, "time/step_seconds") + m(s, "time/publish_seconds"),
        trajectories: m(s, "rollout/trajectories"),
      })),
      intervalSeconds: window / inWindow.length,
      generationSeconds: result.run.mode === "sync" ? mean(spans) : Number.NaN,
    },
  };
}

function table(rows: ReadonlyArray<readonly string[]>): string {
  const widths = (rows[0] ?? []).map((_, c) => Math.max(...rows.map((row) => (row[c] ?? "").length)));
  return rows
    .map((row) =>
      row.map((cell, c) => (c === 0 ? cell.padEnd(widths[c] ?? 0) : cell.padStart(widths[c] ?? 0))).join("  "),
    )
    .join("\n");
}

const runs: Run[] = [
  { label: "async", mode: "async", niceness: RoleNiceness.parse({ trainer: trainerNice }) },
  { label: "sync", mode: "sync", niceness: EQUAL_NICENESS },
];
// --compare-nice: the same async run with every role equal, or with the trainer at +5 when
// --trainer-nice left it equal (the launcher's default)
const compareNice = trainerNice === 0 ? RoleNiceness.parse({ trainer: 5 }) : EQUAL_NICENESS;
if (flags["compare-nice"])
  runs.push({ label: `async trainer +${compareNice.trainer}`, mode: "async", niceness: compareNice });

const root = mkdtempSync(join(tmpdir(), "agentrl-bench-pipeline-"));
// A stop ends the mode under way as its end does (roles stopped) and removes the folders unless --keep.
const stopped = abortOnStopSignals(SCRIPT, "the pipeline under way");
let exitCode = 0;
let summary: PipelineSummary | undefined;
const loads: string[] = [];
try {
  console.log(
    `workload ${workloadName}: task latency (lognormal median ${latency.medianMs} ms, sigma ${latency.sigma}, cap ${latency.maxMs} ms; start + ${latency.probesPerEpisode} probes per episode), ` +
      `batch ${batch} groups x ${groupSize}, async window ${windowBatches} batches (${windowEpisodes} episodes = rollout slots), ${steps} trainer steps per mode, ` +
      `model d=${TINY_MODEL.dModel} L=${TINY_MODEL.layers}, trainer niceness +${trainerNice} in async; load average ${load1()}`,
  );
  let base = flags.base;
  if (base) {
    if (!existsSync(join(base, "policies", "v0"))) throw new Error(`--base ${base} holds no policies/v0/`);
  } else {
    base = join(root, "base");
    const t = performance.now();
    await makeBase(base);
    console.log(`base checkpoint (sft, tiny model): ${((performance.now() - t) / 1000).toFixed(0)} s`);
  }
  const results: ModeResult[] = [];
  for (const run of runs) {
    const before = load1();
    const result = await runMode(run, root, base, stopped);
    if (stopped.aborted) throw new Error(`stopped by ${String(stopped.reason)}`);
    loads.push(`${before} -> ${load1()}`);
    console.log(
      `${run.label}: ${result.records.length} steps in ${result.wallSeconds.toFixed(0)} s${result.interrupted ? " (stopped by --mode-timeout-s)" : ""}; load average ${loads.at(-1)}`,
    );
    results.push(result);
  }
  const summaries = results.map(summarize);
  const [a, s] = summaries;
  if (!a || !s || summaries.some((x) => x === undefined))
    throw new Error(`too few trainer steps to measure; run folders in ${root}`);
  const all = summaries as Summary[];
  const fmt = (x: number, d = 2) => x.toFixed(d);
  const row = (label: string, cell: (x: Summary, i: number) => string) => [label, ...all.map(cell)];
  console.log("");
  console.log(
    table([
      ["", ...runs.map((x) => x.label)],
      row("load average (1 min) before -> after", (_, i) => loads[i] ?? ""),
      row("trainer steps", (x) => String(x.steps)),
      row("trajectories trained", (x) => String(x.trajectories)),
      row(`steady window (after step ${WARMUP_STEPS}) s`, (x) => fmt(x.window, 1)),
      row("trajectories/s trained (steady)", (x) => fmt(x.trainedRate)),
      row("trajectories/s to the trainer (steady)", (x) => fmt(x.steadyRate)),
      row("episodes finished/s (steady)", (x) => fmt(x.generatedRate)),
      row("trajectories/s trained (end to end)", (x) => fmt(x.endToEndRate)),
      row("episodes stored", (_, i) => String(results[i]?.episodes.length)),
      row("episodes completed (rest: bad tool call)", (_, i) => {
        const e = results[i]?.episodes ?? [];
        return fmt(e.filter((x) => x.completed).length / Math.max(e.length, 1));
      }),
      row(
        "mean episode s / mean group (slowest member) s",
        (x) => `${fmt(mean(x.figures.episodeSeconds))} / ${fmt(mean(x.figures.groupSeconds))}`,
      ),
      row("  of an episode: env calls s / generation s", (x) => `${fmt(x.envSeconds)} / ${fmt(x.policySeconds)}`),
      row("trainer busy fraction", (x) => fmt(x.busyFraction)),
      row("train step s", (x) => fmt(x.trainSeconds)),
      row("step interval s", (x) => fmt(x.figures.intervalSeconds)),
    ]),
  );
  console.log("");
  console.log(
    `stage times per step (sync): generation ${fmt(s.figures.generationSeconds)} s; train + publish + hand-off ${fmt(s.figures.intervalSeconds - s.figures.generationSeconds)} s (train step alone ${fmt(s.trainSeconds)} s)`,
  );
  const report = boundReport(shape, a.figures, s.figures);
  for (const line of report.lines) console.log(line);
  const equal = all[2];
  if (equal)
    console.log(
      `priorities: async with the trainer at +${trainerNice} ${fmt(a.trainedRate)}/s, at +${compareNice.trainer} ${fmt(equal.trainedRate)}/s (${fmt(a.trainedRate / equal.trainedRate)}x)`,
    );
  console.log(`measured speedup (end to end, start-up included): ${fmt(a.endToEndRate / s.endToEndRate)}x`);
  summary = {
    asyncOverSync: figure(report.asyncOverSync),
    bound: figure(report.bound),
    asyncTrajPerS: figure(a.trainedRate),
    syncTrajPerS: figure(s.trainedRate),
    limitedBy: report.asyncBound.limitedBy,
    asyncCompareNiceTrajPerS: figure(equal?.trainedRate),
    load1: load1(),
  };
} catch (error) {
  console.error(`bench:pipeline failed: ${(error as Error).message}`);
  exitCode = 1;
} finally {
  if (flags.keep || (exitCode !== 0 && !stopped.aborted)) console.log(`run folders kept in ${root}`);
  else rmSync(root, { recursive: true, force: true });
  console.log(`elapsed ${((performance.now() - benchStarted) / 1000).toFixed(0)} s`);
}
if (summary) printSummary(PipelineSummary, summary);
process.exitCode = exitCode;
