import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type Command, InvalidArgumentError } from "commander";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { ValidationError } from "../../shared/errors.ts";
import { createLogger } from "../../shared/log.ts";
import { newestVersion } from "../../shared/protocol/checkpoints.ts";
import type { EvalReport } from "../../shared/protocol/metrics.ts";
import { secretEnv, withGeneratedSecrets } from "../../shared/security/secrets.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { EXIT_CODES } from "../exitCodes.ts";
import { type EvalLabel, type EvalTarget, evalLabels, evalTasks, runEval } from "../launch/eval.ts";
import { startPolicyServer } from "../launch/policy.ts";
import { startEnvStack } from "../launch/stack.ts";
import { Supervisor } from "../launch/supervisor.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { evalReportMarkdown } from "../report/report.ts";
import { displayPath, runFolderConfig } from "../runFolder.ts";
import { intOption } from "./controller.ts";

interface EvalOptions {
  policy?: string[];
  run?: string;
  model?: string;
  apiKeyEnv?: string;
  tasks?: string[];
  split: "train" | "test";
  n?: number;
  controller?: string;
  out?: string;
  concurrency: number;
  temperature: number;
  topP: number;
  samples: number;
  transcripts: boolean;
  config?: string;
  set?: string[];
}

/** `agentrl eval`: per-task held-out success of a policy version or any OpenAI-compatible model. */
export function register(program: Command): void {
  withConfigOptions(
    program
      .command("eval")
      .description("evaluate a policy version or an OpenAI-compatible endpoint on the tasks' held-out split")
      .option(
        "--policy <version|url...>",
        "a version number, `newest`, or an OpenAI-compatible base URL (…/v1); several (`--policy 0 newest`) play the same instances and the last is compared with the first, instance by instance; with --run, default newest",
        policyOption,
      )
      .option(
        "--run <run-dir>",
        "a run folder `agentrl train` / `npm start` printed: evaluate its versions with its config (instead of --config)",
      )
      .option("--model <name>", "model name sent to an OpenAI-compatible URL")
      .option(
        "--api-key-env <name>",
        "environment variable holding the API key sent to a --policy URL as a bearer token (default: OPENAI_API_KEY when set)",
      )
      .option("--tasks <names...>", "tasks to evaluate (default: the config's task mix)")
      .option("--split <split>", "train or test", splitOption, "test")
      .option(
        "--n <n>",
        "instances per task (from the start of the split; default: the run's evaluation.instances with --run, else 50)",
        intOption("--n", 1),
      )
      .option("--concurrency <n>", "episodes in flight", intOption("--concurrency", 1), 8)
      .option(
        "--temperature <t>",
        "sampling temperature, 0 to 2 (default 0: greedy); sampled episodes are seeded by instance",
        temperatureOption,
        0,
      )
      .option("--top-p <p>", "nucleus sampling of sampled episodes, above 0 and at most 1", topPOption, 1)
      .option(
        "--samples <k>",
        "episodes per instance (needs --temperature > 0); adds pass@k and the share of instances whose samples disagree",
        intOption("--samples", 1),
        1,
      )
      .option(
        "--transcripts",
        "also write eval-<policy>.transcripts.jsonl: every episode's conversation, one JSON line each with its success",
        false,
      )
      .option("--controller <url>", "use a running controller instead of starting one with the tasks' workers")
      .option(
        "--out <dir>",
        "folder for eval-<policy>.json/.md (default: <run>/eval-<time> with --run, else <runDir>/eval-<time>)",
      ),
  ).action(async (options: EvalOptions) => {
    if (options.samples > 1 && options.temperature === 0)
      throw new ValidationError("eval options", [
        {
          path: "--samples",
          message: "more than one sample per instance needs --temperature > 0 (greedy repeats itself)",
        },
      ]);
    if (options.topP < 1 && options.temperature === 0)
      throw new ValidationError("eval options", [
        { path: "--top-p", message: "nucleus sampling needs --temperature > 0 (greedy decoding ignores it)" },
      ]);
    if (options.run && options.config)
      throw new ValidationError("eval options", [
        { path: "--run", message: "give --run or --config, not both (a run folder brings its own config.json)" },
      ]);
    const policies = options.policy ?? (options.run ? ["newest"] : undefined);
    if (policies === undefined)
      throw new ValidationError("eval options", [
        {
          path: "--policy",
          message: 'missing: give a version number, "newest" or an OpenAI-compatible URL (or --run <run folder>)',
        },
      ]);
    const sampling = { temperature: options.temperature, topP: options.topP, samples: options.samples };
    const config = options.run ? await runFolderConfig(options.run, options.set) : await configFromOptions(options);
    const n = options.n ?? (options.run && config.evaluation.instances > 0 ? config.evaluation.instances : 50);
    const apiKey = policies.some(isUrl) ? apiKeyOf(options.apiKeyEnv) : undefined;
    // "newest" is resolved once, here: the report names the version it measured, and a trainer
    // publishing meanwhile cannot change it under the evaluation.
    const targets: EvalTarget[] = [];
    for (const policy of policies)
      targets.push(isUrl(policy) ? { url: policy } : { version: await resolveVersion(config, policy) });
    const labels = evalLabels(targets, options.model, sampling);
    const names = options.tasks ?? config.tasks.mix.map((t) => t.name);
    const tasks = await evalTasks(names, options.split, n);
    const stamp = `eval-${new Date().toISOString().replace(/[:.]/g, "-")}`;
    const outDir = resolve(options.out ?? join(options.run ?? config.runDir, stamp));
    mkdirSync(outDir, { recursive: true });
    const configFile = join(outDir, "config.json");
    writeFileSync(configFile, `${JSON.stringify(config, null, 2)}\n`);
    const log = createLogger({ role: "eval", experimentId: config.experimentId });
    // Our controller, workers and pinned policy server share fresh secrets unless the environment sets them.
    const secrets = withGeneratedSecrets();
    const supervisor = new Supervisor(outDir, { ...process.env, ...secretEnv(secrets) });
    const stop = () => void supervisor.stopAll().then(() => process.exit(EXIT_CODES.interrupted));
    process.once("SIGINT", stop);
    try {
      const stack = startEnvStack(supervisor, {
        ...(options.controller ? { controllerUrl: options.controller } : {}),
        tasks: names.map((name) => ({ name, concurrency: options.concurrency })),
        controllerToken: secrets.controllerSecret,
      });
      // One policy at a time on the same env stack (the first server starts beside it): each
      // version's server runs only for its own episodes.
      const reports: EvalReport[] = [];
      for (const [i, target] of targets.entries()) {
        const server = target.version === undefined ? undefined : `policy-eval-v${target.version}`;
        const [controllerUrl, policyUrl] = await Promise.all([
          stack,
          target.version === undefined
            ? target.url
            : startPolicyServer(supervisor, {
                name: `policy-eval-v${target.version}`,
                configFile,
                pool: "pinned",
                version: target.version,
              }),
        ]);
        const report = await supervisor.guard(
          runEval({
            controllerUrl,
            policyUrl,
            ...(options.model ? { model: options.model } : {}),
            // an external policy URL gets only the key named for it, never ours
            ...(server === undefined ? (apiKey ? { apiKey } : {}) : { policyApiKey: secrets.policyApiKey }),
            controllerToken: secrets.controllerSecret,
            ...(labels[i] as EvalLabel),
            sampling,
            tasks,
            split: options.split,
            maxTokensPerTurn: config.rollout.maxTokensPerTurn,
            concurrency: options.concurrency,
            outDir,
            transcripts: options.transcripts,
            log,
          }),
        );
        reports.push(report);
        if (server !== undefined) await supervisor.stop(server);
      }
      const markdown = evalReportMarkdown(reports);
      if (reports.length > 1) writeFileSync(join(outDir, "eval.md"), `${markdown}\n`);
      process.stdout.write(`${markdown}\n\nwritten to ${displayPath(outDir)}\n`);
    } finally {
      await supervisor.stopAll();
    }
  });
}

function isUrl(policy: string): boolean {
  return /^https?:\/\//.test(policy);
}

/** A version number as given, or the newest one in the experiment's checkpoint store. */
async function resolveVersion(config: ExperimentConfig, policy: string): Promise<number> {
  if (policy !== "newest") return Number(policy);
  const transport = await createTransport(config.transport);
  try {
    const newest = await newestVersion(transport.store("checkpoints"));
    if (newest === undefined)
      throw new ValidationError("eval options", [
        {
          path: "--policy",
          message: `the checkpoint store (${config.transport.kind === "local" ? config.transport.localDir : `s3://${config.transport.checkpointBucket}`}) holds no policy version yet`,
        },
      ]);
    return newest;
  } finally {
    await transport.close();
  }
}

function policyOption(value: string, previous: string[] | undefined): string[] {
  if (/^(newest|\d+)$/.test(value) || (/^https?:\/\/\S+$/.test(value) && URL.canParse(value)))
    return [...(previous ?? []), value];
  throw new InvalidArgumentError(`--policy must be a version number, "newest" or an http(s) URL, got "${value}"`);
}

function temperatureOption(value: string): number {
  const t = Number(value);
  if (value.trim() !== "" && Number.isFinite(t) && t >= 0 && t <= 2) return t;
  throw new InvalidArgumentError(`--temperature must be a number from 0 to 2, got "${value}"`);
}

function topPOption(value: string): number {
  const p = Number(value);
  if (value.trim() !== "" && Number.isFinite(p) && p > 0 && p <= 1) return p;
  throw new InvalidArgumentError(`--top-p must be a number above 0 and at most 1, got "${value}"`);
}

function splitOption(value: string): "train" | "test" {
  if (value === "train" || value === "test") return value;
  throw new InvalidArgumentError(`--split must be "train" or "test", got "${value}"`);
}

/** The key in `--api-key-env`'s variable (which must then be set), else OPENAI_API_KEY when set. */
export function apiKeyOf(variable: string | undefined, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (variable === undefined) return env.OPENAI_API_KEY || undefined;
  if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(variable))
    throw new ValidationError("eval options", [
      { path: "--api-key-env", message: `"${variable}" is not an environment variable name` },
    ]);
  const key = env[variable];
  if (!key)
    throw new ValidationError("eval options", [
      {
        path: "--api-key-env",
        message: `environment variable ${variable} is not set (or empty); export the API key in it`,
      },
    ]);
  return key;
}
