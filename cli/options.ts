import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import type { Command } from "commander";
import { AGENTBENCH_DIR_ENV } from "../shared/agentbench/data.ts";
import { type ExperimentConfig, loadConfig } from "../shared/config/index.ts";
import { ValidationError } from "../shared/errors.ts";

/** Adds the options every experiment-running command shares: --config and --set. */
export function withConfigOptions(
  command: Command,
  configHelp = "experiment config (YAML or JSON); without one every field takes its default",
): Command {
  return command
    .option("-c, --config <file>", configHelp)
    .option("--set <path=value...>", "override a config field, e.g. --set trainer.maxSteps=5", []);
}

export async function configFromOptions(options: { config?: string; set?: string[] }): Promise<ExperimentConfig> {
  if (options.config !== undefined) assertConfigFile(options.config, "--config");
  const config = await loadConfig(options.config, { overrides: options.set ?? [] });
  // The AgentBench tasks find their data through one channel, the environment, which every role
  // this process starts inherits; the config's field fills it when the user has not.
  const { dir } = config.tasks.agentbench;
  if (dir && !process.env[AGENTBENCH_DIR_ENV]) process.env[AGENTBENCH_DIR_ENV] = resolve(dir);
  return config;
}

/** A config file named on the command line must exist and be a file; the message names it and the option. */
export function assertConfigFile(
  file: string,
  option: string,
  wanted = "a YAML or JSON experiment config (e.g. configs/quickstart.yaml, or none for all defaults)",
): void {
  const problem = !existsSync(file)
    ? "does not exist"
    : statSync(file).isDirectory()
      ? "is a folder, not a config file"
      : undefined;
  if (problem)
    throw new ValidationError("options", [
      {
        path: option,
        message: `${file} ${problem}; give ${wanted}`,
      },
    ]);
}
