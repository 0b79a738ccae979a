import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { type Command, InvalidArgumentError } from "commander";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { ValidationError } from "../../shared/errors.ts";
import { isHfFolder } from "../../shared/model/hf/base.ts";
import { EXIT_CODES } from "../exitCodes.ts";
import { BASE_CHECKPOINT_DIR, runPipeline } from "../launch/pipeline.ts";
import { createProgressView } from "../launch/progress.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { evalComparisonMarkdown, samplingTableMarkdown } from "../report/report.ts";
import { displayPath, nextStepsText } from "../runFolder.ts";
import { intOption } from "./controller.ts";

/** Config of `npm start`: a short multi-task run sized for 2 CPU cores. */
export const QUICKSTART_CONFIG = new URL("../../configs/quickstart.yaml", import.meta.url).pathname;

export interface TrainOptions {
  config?: string;
  set?: string[];
  transport?: "local" | "aws";
  endpoint?: string;
  runDir?: string;
  evalN?: number;
  base?: string;
}

function addTrainOptions(command: Command, configHelp?: string): Command {
  return withConfigOptions(command, configHelp)
    .option("--transport <kind>", "local (SQLite queue + directory store) or aws (SQS + S3)", transportOption)
    .option("--endpoint <url>", "AWS-API endpoint (moto server, LocalStack); implies --transport aws")
    .option("--run-dir <dir>", "folder of this run (default: <runDir>/<experimentId>-<time>)")
    .option(
      "--eval-n <n>",
      "held-out instances per task for the closing evaluation, 0 skips it (default: the config's evaluation.instances)",
      intOption("--eval-n", 0),
    )
    .option(
      "--base <dir>",
      "base checkpoint folder imported as v0 when the store is empty (default: the config's policy.base, else trainer-image/base-policy)",
    );
}

/** Applies --transport/--endpoint and --eval-n on top of the config, re-validating the result. */
function withFlags(config: ExperimentConfig, options: TrainOptions): ExperimentConfig {
  const evaluation =
    options.evalN === undefined ? config.evaluation : { ...config.evaluation, instances: options.evalN };
  if (!options.transport && !options.endpoint) return parseConfig({ ...config, evaluation });
  if (options.transport === "local" && options.endpoint)
    throw new ValidationError("options", [
      { path: "--endpoint", message: "needs --transport aws (or no --transport); the local transport has no endpoint" },
    ]);
  return parseConfig({
    ...config,
    evaluation,
    transport: {
      ...config.transport,
      kind: options.endpoint ? "aws" : options.transport,
      ...(options.endpoint ? { endpoint: options.endpoint } : {}),
    },
  });
}

/**
 * `--base`, else the config's `policy.base`, else the committed warm-up; a named folder must hold
 * a checkpoint or be a Hugging Face model folder (imported as v0 when the run starts).
 */
export function baseCheckpointOf(config: ExperimentConfig, options: TrainOptions): string {
  const [path, base] = options.base
    ? ["--base", options.base]
    : config.policy.base
      ? ["policy.base", config.policy.base]
      : ["", BASE_CHECKPOINT_DIR];
  if (path && !existsSync(join(base, "policies")) && !isHfFolder(base))
    throw new ValidationError("options", [
      {
        path,
        message: `${base} holds no checkpoint (expected policies/v<N>/ in it) and is no Hugging Face model folder (config.json + safetensors)`,
      },
    ]);
  return resolve(base);
}

async function train(options: TrainOptions): Promise<void> {
  const config = withFlags(await configFromOptions(options), options);
  const stamp = new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
  const runDir = resolve(options.runDir ?? join(config.runDir, `${config.experimentId}-${stamp}`));
  const stop = new AbortController();
  const onSignal = () => {
    process.stderr.write("\nstopping every role (Ctrl-C again to force)…\n");
    stop.abort();
    process.once("SIGINT", () => process.exit(EXIT_CODES.interrupted));
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  process.stderr.write(`run folder: ${displayPath(runDir)}\n`);
  const result = await runPipeline({
    config,
    runDir,
    baseCheckpoint: baseCheckpointOf(config, options),
    signal: stop.signal,
    progress: createProgressView(),
  });
  const lines = [
    result.interrupted ? `interrupted after ${result.steps} trainer steps` : `${result.steps} trainer steps`,
  ];
  if (result.evals.length > 0) {
    const { instances, temperature, samples } = config.evaluation;
    const how =
      temperature > 0 ? `sampled at T=${temperature}${samples > 1 ? `, ${samples} samples each` : ""}` : "greedy";
    lines.push(
      "",
      `Test success (%), ${instances} held-out instances per task, ${how}:`,
      "",
      evalComparisonMarkdown(result.evals),
    );
    for (const report of result.evals) {
      const sampling = samplingTableMarkdown(report);
      if (sampling) lines.push("", sampling);
    }
  }
  lines.push(
    "",
    `report: ${displayPath(result.reportFile)}`,
    "",
    nextStepsText(runDir, {
      ...(options.config ? { configFile: options.config } : {}),
      evalN: config.evaluation.instances || 20,
    }),
  );
  process.stdout.write(`${lines.join("\n")}\n`);
  if (result.interrupted) process.exitCode = EXIT_CODES.interrupted;
}

/** `agentrl train` runs any experiment; `agentrl start` runs the quickstart (what `npm start` calls). */
export function register(program: Command): void {
  addTrainOptions(
    program
      .command("train")
      .description("run an experiment: controller, env workers, policy servers, feeder, rollout workers and trainer"),
  ).action(train);
  addTrainOptions(
    program
      .command("start")
      .description(
        "the embedded default (npm start): a short multi-task run of the whole pipeline on this machine, configs/quickstart.yaml",
      ),
    "experiment config (YAML or JSON); default configs/quickstart.yaml",
  ).action((options: TrainOptions) => train({ ...options, config: options.config ?? QUICKSTART_CONFIG }));
}

function transportOption(value: string): "local" | "aws" {
  if (value === "local" || value === "aws") return value;
  throw new InvalidArgumentError(`--transport must be "local" or "aws", got "${value}"`);
}
