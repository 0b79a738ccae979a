/**
 * `npm run bench:pipeline` — the async pipeline against sync (generate a batch, train, repeat) on
 * the same workload, side by side in one run. The workload is the `latency` task (seeded lognormal
 * environment delays, the same instances and delays in both modes) with a tiny model, so what is
 * measured is the overlap of generation and training, not model speed. Every role runs as a child
 * process through runPipeline, exactly as `agentrl train` does.
 *
 * Printed per mode, over the steady state (from the end of trainer step 1 to the end of the last
 * step, so start-up and the first batch, which nothing can overlap, are left out):
 * - trajectories/s consumed by the trainer, and end to end over the whole run;
 * - trainer busy fraction: time inside train steps (`time/step_seconds`) over the window;
 * - stage times per step: train = mean `time/step_seconds`; generation = the rest of a sync step
 *   interval (rollouts, env latency, publish and policy reload);
 * then the ideal speedup (generation + train) / max(generation, train) from the sync stage times
 * beside the measured one (async trajectories/s over sync trajectories/s).
 *
 * Flags: --base DIR (reuse a base checkpoint folder holding policies/v0/), --steps N (trainer
 * steps per mode, default 10), --median-ms X and --sigma S (env delay), --probes K (tool calls per
 * episode), --keep (keep the temp folder). Bounded: each mode is aborted after --mode-timeout-s.
 */
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import pino from "pino";
import { z } from "zod";
import { runPipeline } from "../cli/launch/pipeline.ts";
import { AGENTRL_BIN } from "../cli/launch/supervisor.ts";
import { readMetrics } from "../cli/report/report.ts";
import { LATENCY_ENV, LatencyOptions } from "../env-images/latency/index.ts";
import { type ExperimentConfig, parseConfig } from "../shared/config/index.ts";
import { createLogger } from "../shared/log.ts";
import type { StepMetrics } from "../shared/protocol/metrics.ts";
import { LocalObjectStore } from "../shared/transport/local.ts";

const benchStarted = performance.now();
const { values: flags } = parseArgs({
  options: {
    base: { type: "string" },
    steps: { type: "string", default: "10" },
    "median-ms": { type: "string", default: "400" },
    sigma: { type: "string", default: "1" },
    probes: { type: "string", default: "1" },
    "mode-timeout-s": { type: "string", default: "240" },
    keep: { type: "boolean", default: false },
  },
});

function intFlag(name: string, value: string, min: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    console.error(`--${name} must be an integer >= ${min}, got "${value}"`);
    process.exit(2);
  }
  return n;
}

const steps = intFlag("steps", flags.steps, 3);
const modeTimeoutS = intFlag("mode-timeout-s", flags["mode-timeout-s"], 30);
const latencyParsed = LatencyOptions.safeParse({
  medianMs: Number(flags["median-ms"]),
  sigma: Number(flags.sigma),
  probesPerEpisode: Number(flags.probes),
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

function workload(mode: "async" | "sync"): ExperimentConfig {
  return parseConfig({
    experimentId: `bench-pipeline-${mode}`,
    seed: 7,
    policy: { model: TINY_MODEL },
    tasks: { mix: [{ name: "latency", concurrency: 32 }] },
    rollout: {
      groupSize: 4,
      maxTurns: latency.probesPerEpisode + 2,
      maxTokensPerTurn: 64,
      // a cool sampler keeps the tiny model's tool calls well-formed; guesses still vary, so rewards do
      temperature: 0.4,
      workers: 1,
      concurrency: 16,
      crossPolicy: { enabled: false },
    },
    trainer: { mode, batchSize: 2, maxSteps: steps, warmupFactor: 1, checkpointEvery: 1 },
    // Throughput only: no closing evaluation.
    evaluation: { instances: 0 },
  });
}

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
  readonly mode: "async" | "sync";
  readonly wallSeconds: number;
  readonly records: StepMetrics[];
  readonly episodes: Episode[];
  readonly interrupted: boolean;
}

/** What the bench reads of a stored trajectory: when it ran. */
const EpisodeTimes = z.object({
  status: z.string(),
  reward: z.number(),
  timings: z.object({ startedAt: z.string(), finishedAt: z.string() }),
});
interface Episode {
  readonly completed: boolean;
  readonly reward: number;
  readonly started: number;
  readonly finished: number;
}

async function readEpisodes(runDir: string): Promise<Episode[]> {
  const store = new LocalObjectStore(join(runDir, "transport", "objects", "trajectories"));
  const episodes: Episode[] = [];
  for (const info of await store.list("trajectories/")) {
    const text = await store.getText(info.key);
    const parsed = EpisodeTimes.safeParse(text === undefined ? undefined : JSON.parse(text));
    if (!parsed.success) continue;
    episodes.push({
      completed: parsed.data.status === "completed",
      reward: parsed.data.reward,
      started: Date.parse(parsed.data.timings.startedAt),
      finished: Date.parse(parsed.data.timings.finishedAt),
    });
  }
  return episodes;
}

async function runMode(mode: "async" | "sync", root: string, base: string): Promise<ModeResult> {
  const runDir = join(root, mode);
  const log = createLogger(
    { role: "bench", mode },
    pino.destination({ dest: join(root, `${mode}-pipeline.log`), sync: true, mkdir: true }),
  );
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(new Error(`${mode} exceeded ${modeTimeoutS} s`)), modeTimeoutS * 1000);
  const t0 = performance.now();
  try {
    const result = await runPipeline({
      config: workload(mode),
      runDir,
      baseCheckpoint: base,
      signal: stop.signal,
      log,
    });
    return {
      mode,
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
  /**
   * Trajectories that reached the trainer per second in the window: consumed plus the change of
   * the trainer's buffer, so a batch generated ahead during warm-up is not counted as throughput.
   */
  readonly steadyRate: number;
  /** Episodes finished per second in the window, whether trained yet or not. */
  readonly generatedRate: number;
  /** All trained trajectories over the whole runPipeline call (start-up and shutdown included). */
  readonly endToEndRate: number;
  /** Time inside train steps (`time/step_seconds`) over the window. */
  readonly busyFraction: number;
  /** Mean train step and mean step interval in the window. */
  readonly trainSeconds: number;
  readonly intervalSeconds: number;
  /** Mean span (first start to last finish) of the episodes started after a step and finished by the next. */
  readonly generationSeconds: number;
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
  const generated = result.episodes.filter((e) => e.finished > windowStart && e.finished <= windowEnd).length;
  // sync: batch i is generated after step i-1 published and before step i ends; its span is the
  // first start to the last finish of those episodes (meaningless in async, where batches overlap)
  const spans: number[] = [];
  for (let i = skip + 1; i < r.length; i++) {
    const after = Date.parse((r[i - 1] as StepMetrics).time);
    const until = Date.parse((r[i] as StepMetrics).time);
    const batch = result.episodes.filter((e) => e.started >= after && e.finished <= until);
    if (batch.length === 0) continue;
    spans.push((Math.max(...batch.map((e) => e.finished)) - Math.min(...batch.map((e) => e.started))) / 1000);
  }
  return {
    steps: r.length,
    trajectories: r.reduce((sum, s) => sum + m(s, "rollout/trajectories"), 0),
    window,
    steadyRate: arrived / window,
    generatedRate: generated / ((windowEnd - windowStart) / 1000),
    endToEndRate: r.reduce((sum, s) => sum + m(s, "rollout/trajectories"), 0) / result.wallSeconds,
    busyFraction: trained / window,
    trainSeconds: trained / inWindow.length,
    intervalSeconds: window / inWindow.length,
    generationSeconds: spans.length ? spans.reduce((a, b) => a + b, 0) / spans.length : Number.NaN,
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

const root = mkdtempSync(join(tmpdir(), "agentrl-bench-pipeline-"));
let exitCode = 0;
try {
  console.log(
    `workload: task latency (lognormal median ${latency.medianMs} ms, sigma ${latency.sigma}, cap ${latency.maxMs} ms; start + ${latency.probesPerEpisode} probes per episode), ` +
      `batch 2 groups x 4, ${steps} trainer steps per mode, model d=${TINY_MODEL.dModel} L=${TINY_MODEL.layers}; load average ${loadavg()[0]?.toFixed(1)}`,
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
  for (const mode of ["async", "sync"] as const) {
    const result = await runMode(mode, root, base);
    console.log(
      `${mode}: ${result.records.length} steps in ${result.wallSeconds.toFixed(0)} s${result.interrupted ? " (stopped by --mode-timeout-s)" : ""}`,
    );
    results.push(result);
  }
  const [a, s] = results.map(summarize);
  if (!a || !s) throw new Error(`too few trainer steps to measure; run folders in ${root}`);
  const fmt = (x: number, d = 2) => x.toFixed(d);
  console.log("");
  console.log(
    table([
      ["", "async", "sync"],
      ["trainer steps", String(a.steps), String(s.steps)],
      ["trajectories trained", String(a.trajectories), String(s.trajectories)],
      [`steady window (after step ${WARMUP_STEPS}) s`, fmt(a.window, 1), fmt(s.window, 1)],
      ["trajectories/s to the trainer (steady)", fmt(a.steadyRate), fmt(s.steadyRate)],
      ["episodes finished/s (steady)", fmt(a.generatedRate), fmt(s.generatedRate)],
      ["trajectories/s trained (end to end)", fmt(a.endToEndRate), fmt(s.endToEndRate)],
      ["episodes stored", String(results[0]?.episodes.length), String(results[1]?.episodes.length)],
      [
        "episodes completed (rest: bad tool call)",
        ...results.map((x) => fmt(x.episodes.filter((e) => e.completed).length / Math.max(x.episodes.length, 1))),
      ],
      [
        "mean reward",
        ...results.map((x) => fmt(x.episodes.reduce((sum, e) => sum + e.reward, 0) / Math.max(x.episodes.length, 1))),
      ],
      ["trainer busy fraction", fmt(a.busyFraction), fmt(s.busyFraction)],
      ["train step s", fmt(a.trainSeconds), fmt(s.trainSeconds)],
      ["step interval s", fmt(a.intervalSeconds), fmt(s.intervalSeconds)],
    ]),
  );
  // sync runs the two stages in series: generation of a batch, then everything until the next
  // batch may start (train step, publish, policy reload, hand-off). Async can at best overlap them.
  const gen = s.generationSeconds;
  const rest = s.intervalSeconds - gen;
  const ideal = (gen + rest) / Math.max(gen, rest);
  console.log("");
  console.log(
    `stage times per step (sync): generation ${fmt(gen)} s; train + publish + hand-off ${fmt(rest)} s (train step alone ${fmt(s.trainSeconds)} s)`,
  );
  console.log(`ideal speedup (generation + train side) / max of the two: ${fmt(ideal)}x`);
  console.log(`measured speedup (async / sync trajectories/s, steady): ${fmt(a.steadyRate / s.steadyRate)}x`);
  console.log(`measured speedup (end to end, start-up included): ${fmt(a.endToEndRate / s.endToEndRate)}x`);
} catch (error) {
  console.error(`bench:pipeline failed: ${(error as Error).message}`);
  exitCode = 1;
} finally {
  if (flags.keep || exitCode !== 0) console.log(`run folders kept in ${root}`);
  else rmSync(root, { recursive: true, force: true });
  console.log(`elapsed ${((performance.now() - benchStarted) / 1000).toFixed(0)} s`);
}
process.exitCode = exitCode;
