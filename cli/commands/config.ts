import type { Command } from "commander";
import { loadConfig } from "../../shared/config/index.ts";
import { configReferenceMarkdown } from "../../shared/config/reference.ts";
import { assertConfigFile } from "../options.ts";

export function register(program: Command): void {
  const config = program.command("config").description("inspect and validate experiment configs");
  config
    .command("validate")
    .description("validate an experiment config (YAML or JSON) with environment overrides applied")
    .argument("<file>", "config file")
    .option("--set <path=value...>", "override a field, e.g. --set trainer.maxSteps=5", [])
    .option("--print", "print the resolved config with every default filled in")
    .action(async (file: string, options: { set: string[]; print?: boolean }) => {
      assertConfigFile(file, "<file>", "a YAML or JSON experiment config, e.g. configs/quickstart.yaml");
      const resolved = await loadConfig(file, { overrides: options.set });
      if (options.print) process.stdout.write(`${JSON.stringify(resolved, null, 2)}\n`);
      else process.stdout.write(`${file}: valid (experiment ${resolved.experimentId})\n`);
    });
  config
    .command("docs")
    .description("print the configuration reference (every field, its default and allowed values) as Markdown")
    .action(() => {
      process.stdout.write(configReferenceMarkdown());
    });
}
