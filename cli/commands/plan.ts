import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import { z } from "zod";
import { inFlightGroupCap } from "../../functions/feeder/feeder.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { ValidationError } from "../../shared/errors.ts";
import { parseCalibration } from "../../shared/plan/calibration.ts";
import { type PlanReport, runScenario, type Scenario } from "../../shared/plan/scenario.ts";
import { groupsNeeded } from "../../trainer-image/trainer/buffer.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { formatPlan } from "../plan/format.ts";

/** The committed calibration file (`npm run calibrate` rewrites its measured figures). */
export const DEFAULT_CALIBRATION = fileURLToPath(new URL("../../calibration/calibration.json", import.meta.url));

const count = (max: number) =>
  z
    .string()
    .regex(/^\d+$/, `must be a whole number from 1 to ${max.toLocaleString("en-US")}`)
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(1, "must be at least 1")
        .max(max, `must be at most ${max.toLocaleString("en-US")}`),
    );

/** The flags, as commander hands them over (strings); each failure names its flag and the range. */
export const PlanFlags = z
  .object({
    envWorkers: count(1_000_000).optional(),
    policyServers: count(100_000).default(1),
    trainerGpus: count(4096).default(1),
    controllers: count(10_000).default(1),
    rolloutWorkers: count(100_000).optional(),
    steps: count(10_000).optional(),
    seed: z.string().regex(/^\d+$/, "must be a whole number").transform(Number).default(7),
    decode: z.string().min(1).default("vllm-8b-h100"),
    trainer: z.string().min(1).default("gpu-8b-h100"),
    calibration: z.string().min(1).default(DEFAULT_CALIBRATION),
    json: z.boolean().default(false),
  })
  .strict();
export type PlanFlags = z.infer<typeof PlanFlags>;

const FLAG_NAMES: Record<string, string> = {
  envWorkers: "--env-workers",
  policyServers: "--policy-servers",
  trainerGpus: "--trainer-gpus",
  controllers: "--controllers",
  rolloutWorkers: "--rollout-workers",
  steps: "--steps",
  seed: "--seed",
  decode: "--decode",
  trainer: "--trainer",
  calibration: "--calibration",
};

export function parsePlanFlags(raw: Record<string, unknown>): PlanFlags {
  const { config: _config, set: _set, ...flags } = raw;
  const parsed = PlanFlags.safeParse(flags);
  if (parsed.success) return parsed.data;
  throw new ValidationError(
    "options",
    parsed.error.issues.map((issue) => {
      const key = String(issue.path[0] ?? "");
      const given = typeof flags[key] === "string" ? ` (got "${flags[key]}")` : "";
      return { path: FLAG_NAMES[key] ?? key, message: `${issue.message}${given}` };
    }),
  );
}

/** Env workers split over the task mix by weight, each task at least one. */
export function splitWorkers(total: number, weights: readonly number[]): number[] {
  const sum = weights.reduce((a, b) => a + b, 0);
  return weights.map((w) => Math.max(1, Math.round((total * w) / sum)));
}

/**
 * Steps simulated when --steps is not given: 20, fewer for big batches so that about 400,000
 * episodes are simulated (a 10,000-worker plan stays well under a minute), never under 4.
 */
export function autoSteps(trajectoriesPerStep: number): number {
  return Math.max(4, Math.min(20, Math.ceil(200_000 / trajectoriesPerStep)));
}

/** The scenario of a config and the flags: the same windows and bounds the roles compute. */
export function scenarioOf(config: ExperimentConfig, flags: PlanFlags): Scenario {
  const mix = config.tasks.mix;
  const envTotal = flags.envWorkers ?? mix.reduce((sum, t) => sum + t.maxWorkers, 0);
  const workers = splitWorkers(
    envTotal,
    mix.map((t) => t.weight),
  );
  const rolloutWorkers = flags.rolloutWorkers ?? config.rollout.workers;
  const warmup = config.trainer.mode === "sync" ? 1 : config.trainer.warmupFactor;
  const steps = flags.steps ?? autoSteps(config.trainer.batchSize * config.rollout.groupSize);
  return {
    mode: config.trainer.mode,
    groupSize: config.rollout.groupSize,
    batchGroups: config.trainer.batchSize,
    windowGroups: inFlightGroupCap(config),
    firstStepGroups: groupsNeeded(config.trainer.batchSize, warmup, true),
    maxStaleness: config.trainer.maxStaleness,
    checkpointEvery: config.trainer.checkpointEvery,
    rolloutSlots: rolloutWorkers * config.rollout.concurrency,
    rolloutWorkers,
    controllers: flags.controllers,
    tasks: mix.map((t, i) => ({
      name: t.name,
      weight: t.weight,
      envWorkers: workers[i] as number,
      sessionsPerWorker: t.exclusive ? 1 : t.concurrency,
      exclusive: t.exclusive,
    })),
    policyServers: flags.policyServers,
    trainerDevices: flags.trainerGpus,
    decode: flags.decode,
    trainer: flags.trainer,
    seed: flags.seed,
    steps,
    warmupSteps: Math.min(4, Math.floor(steps / 4)),
  };
}

/** The one JSON line of `--json`. */
export function planJson(scenario: Scenario, report: PlanReport, wallSeconds: number) {
  const r = report.result;
  return {
    trajectoriesPerS: r.trajectoriesPerS,
    tokensPerS: r.generatedTokensPerS,
    trainedTokensPerS: r.trainedTokensPerS,
    bottleneck: report.bottleneck,
    costPer1MTrajectories: { onDemand: report.bill.onDemandPer1M, spot: report.bill.spotPer1M },
    costPerHour: { onDemand: report.bill.onDemandPerHour, spot: report.bill.spotPerHour },
    utilisation: Object.fromEntries(r.utilisation.map((u) => [u.role, u.utilisation])),
    staleness: { histogram: r.staleness, beyondBound: r.staleBeyondBound, bound: scenario.maxStaleness },
    limits: report.limits.map((l) => ({ limit: l.limit, rate: l.rate, value: l.value, share: l.share })),
    costLines: report.bill.lines,
    scenario: { ...scenario, delayMs: undefined },
    meanOutstanding: r.meanOutstanding,
    windowEpisodes: r.windowEpisodes,
    simulatedSeconds: r.simulatedSeconds,
    events: r.events,
    truncated: r.truncated,
    wallSeconds,
  };
}

export function register(program: Command): void {
  withConfigOptions(
    program
      .command("plan")
      .description(
        "simulate the pipeline at a scale this machine cannot run (discrete events, calibrated by the benches): throughput, utilisation per role, the bottleneck, staleness, $ per hour and per 1M trajectories",
      )
      .option("--env-workers <n>", "env workers in all, split over tasks.mix by weight (default: the mix's maxWorkers)")
      .option("--policy-servers <n>", "policy servers (one GPU each with a GPU decode profile)")
      .option("--trainer-gpus <n>", "trainer devices (data parallel)")
      .option("--controllers <n>", "controllers, sessions routed by id")
      .option(
        "--rollout-workers <n>",
        "rollout worker processes (default: rollout.workers), each rollout.concurrency episodes",
      )
      .option("--decode <profile>", "calibration decode profile (vllm-8b-h100, tiny-cpu)")
      .option("--trainer <profile>", "calibration trainer profile (gpu-8b-h100, tiny-cpu)")
      .option(
        "--steps <n>",
        "trainer steps to simulate, figures from the steps after the first quarter (default: 20, fewer for big batches, at least 4)",
      )
      .option("--seed <n>", "seed of the simulated draws")
      .option("--calibration <file>", "calibration file (default: calibration/calibration.json)")
      .option("--json", "print the result as one JSON line"),
  ).action(async (raw: Record<string, unknown>) => {
    const flags = parsePlanFlags(raw);
    if (!existsSync(flags.calibration))
      throw new ValidationError("options", [
        {
          path: "--calibration",
          message: `${flags.calibration} does not exist; give a calibration file (npm run calibrate writes one)`,
        },
      ]);
    let calibrationJson: unknown;
    try {
      calibrationJson = JSON.parse(readFileSync(flags.calibration, "utf8"));
    } catch (error) {
      throw new ValidationError("options", [
        { path: "--calibration", message: `${flags.calibration} is not JSON (${(error as Error).message})` },
      ]);
    }
    let calibration: ReturnType<typeof parseCalibration>;
    try {
      calibration = parseCalibration(calibrationJson, flags.calibration);
    } catch (error) {
      throw new ValidationError("options", [{ path: "--calibration", message: (error as Error).message }]);
    }
    for (const [flag, table, key] of [
      ["--decode", calibration.decode, flags.decode],
      ["--trainer", calibration.trainer, flags.trainer],
    ] as const)
      if (!(key in table))
        throw new ValidationError("options", [
          {
            path: flag,
            message: `no profile "${key}" in ${flags.calibration}; allowed: ${Object.keys(table).join(", ")}`,
          },
        ]);
    const config = await configFromOptions(raw as { config?: string; set?: string[] });
    const scenario = scenarioOf(config, flags);
    const started = performance.now();
    const report = runScenario(scenario, calibration);
    const wallSeconds = (performance.now() - started) / 1000;
    if (flags.json) process.stdout.write(`${JSON.stringify(planJson(scenario, report, wallSeconds))}\n`);
    else process.stdout.write(`${formatPlan(scenario, report, calibration, wallSeconds).join("\n")}\n`);
  });
}
