import type { Command } from "commander";
import { type ExperimentConfig, loadConfig } from "../shared/config/index.ts";

/** Adds the options every experiment-running command shares: --config and --set. */
export function withConfigOptions(command: Command): Command {
  return command
    .option("-c, --config <file>", "experiment config (YAML or JSON); defaults apply without one")
    .option("--set <path=value...>", "override a config field, e.g. --set trainer.maxSteps=5", []);
}

export function configFromOptions(options: { config?: string; set?: string[] }): Promise<ExperimentConfig> {
  return loadConfig(options.config, { overrides: options.set ?? [] });
}
