import { existsSync, statSync } from "node:fs";
import type { Command } from "commander";
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

export function configFromOptions(options: { config?: string; set?: string[] }): Promise<ExperimentConfig> {
  if (options.config !== undefined) assertConfigFile(options.config, "--config");
  return loadConfig(options.config, { overrides: options.set ?? [] });
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
