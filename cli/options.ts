import { resolve } from "node:path";
import type { Command } from "commander";
import { AGENTBENCH_DIR_ENV } from "../shared/agentbench/data.ts";
import { type ExperimentConfig, loadConfig } from "../shared/config/index.ts";

/** Adds the options every experiment-running command shares: --config and --set. */
export function withConfigOptions(command: Command): Command {
  return command
    .option("-c, --config <file>", "experiment config (YAML or JSON); defaults apply without one")
    .option("--set <path=value...>", "override a config field, e.g. --set trainer.maxSteps=5", []);
}

export async function configFromOptions(options: { config?: string; set?: string[] }): Promise<ExperimentConfig> {
  const config = await loadConfig(options.config, { overrides: options.set ?? [] });
  // The AgentBench tasks find their data through one channel, the environment, which every role
  // this process starts inherits; the config's field fills it when the user has not.
  const { dir } = config.tasks.agentbench;
  if (dir && !process.env[AGENTBENCH_DIR_ENV]) process.env[AGENTBENCH_DIR_ENV] = resolve(dir);
  return config;
}
