import { readFileSync } from "node:fs";
import { Command, CommanderError, type Option } from "commander";
import { AgentRlError, ValidationError } from "../shared/errors.ts";
import { EXIT_CODES as EXIT } from "./exitCodes.ts";
import { stopWhenSupervisorGone } from "./supervisorWatch.ts";

/**
 * `agentrl` — one entry for every role. Each subcommand lives in cli/commands/<name>.ts and
 * imports its role lazily, so `--help` and `config validate` never load TF.js or the AWS SDK.
 */
type CommandModule = () => Promise<{ register(program: Command): void }>;
const train: CommandModule = () => import("./commands/train.ts");
/** Each top-level command and the module that registers it. */
const COMMANDS: Readonly<Record<string, CommandModule>> = {
  config: () => import("./commands/config.ts"),
  controller: () => import("./commands/controller.ts"),
  env: () => import("./commands/env.ts"),
  data: () => import("./commands/data.ts"),
  container: () => import("./commands/container.ts"),
  sweep: () => import("./commands/sweep.ts"),
  eval: () => import("./commands/eval.ts"),
  train,
  start: train,
  report: () => import("./commands/report.ts"),
  view: () => import("./commands/view.ts"),
  policy: () => import("./commands/policy.ts"),
  sft: () => import("./commands/sft.ts"),
  feeder: () => import("./commands/feeder.ts"),
  rollout: () => import("./commands/rollout.ts"),
  trainer: () => import("./commands/trainer.ts"),
  gateway: () => import("./commands/gateway.ts"),
  plan: () => import("./commands/plan.ts"),
};

/**
 * The modules to load for `argv`: the named command's alone (every role is a process, and loading
 * the other sixteen costs each start about a quarter of its CPU), or all of them for the program's
 * own help and version, a misspelt command (commander suggests the nearest one) and `container`
 * (it runs the role its environment names).
 */
function modulesFor(argv: readonly string[]): CommandModule[] {
  const name = argv[2] ?? "";
  const named = Object.hasOwn(COMMANDS, name) && name !== "container" ? COMMANDS[name] : undefined;
  return named ? [named] : [...new Set(Object.values(COMMANDS))];
}

/**
 * Commander checks required options before unknown ones, so `eval --polcy 3` would report the
 * missing `--policy` and hide the typo; this command reports the unknown option (with commander's
 * "Did you mean") first.
 */
class AgentRlCommand extends Command {
  declare unknownOption: (flag: string) => never;
  declare missingMandatoryOptionValue: (option: Option) => never;

  override createCommand(name?: string): AgentRlCommand {
    return new AgentRlCommand(name);
  }

  constructor(name?: string) {
    super(name);
    const missing = AgentRlCommand.prototype.missingMandatoryOptionValue;
    this.missingMandatoryOptionValue = (option: Option): never => {
      const known = new Set(this.options.flatMap((o) => [o.long, o.short]).filter(Boolean));
      const unknown = this.args.find((arg) => /^--?[^-]/.test(arg) && !known.has(arg.split("=")[0]));
      if (unknown) this.unknownOption(unknown.split("=")[0] as string);
      return missing.call(this, option);
    };
  }
}

function packageVersion(): string {
  const text = readFileSync(new URL("../package.json", import.meta.url), "utf8");
  return (JSON.parse(text) as { version: string }).version;
}

async function main(argv: string[]): Promise<void> {
  stopWhenSupervisorGone();
  const program = new AgentRlCommand("agentrl")
    .description("Multi-turn, multi-task agentic RL on queues and object stores (AgentRL in TypeScript)")
    .version(packageVersion(), "-V, --version", "print the version")
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();
  for (const load of modulesFor(argv)) (await load()).register(program);
  await program.parseAsync(argv);
}

main(process.argv).catch(async (error: unknown) => {
  if (error instanceof CommanderError) process.exit(error.exitCode === 0 ? EXIT.ok : EXIT.usage);
  if (error instanceof ValidationError) {
    const { withFieldHints } = await import("./suggest.ts");
    const hinted = error.what === "config" ? withFieldHints(error) : error;
    process.stderr.write(`agentrl: ${hinted.message}\n`);
    process.exit(EXIT.usage);
  }
  if (error instanceof AgentRlError) {
    process.stderr.write(`agentrl: ${error.message}\n`);
    process.exit(EXIT.failed);
  }
  process.stderr.write(
    `agentrl: unexpected error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(EXIT.failed);
});
