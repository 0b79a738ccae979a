import { Command, CommanderError } from "commander";
import { AgentRlError, ValidationError } from "../shared/errors.ts";

/**
 * `agentrl` — one entry for every role. Each subcommand lives in cli/commands/<name>.ts and
 * imports its role lazily, so `--help` and `config validate` never load TF.js or the AWS SDK.
 */
const COMMANDS: ReadonlyArray<() => Promise<{ register(program: Command): void }>> = [
  () => import("./commands/config.ts"),
  () => import("./commands/controller.ts"),
  () => import("./commands/env.ts"),
  () => import("./commands/container.ts"),
  () => import("./commands/sweep.ts"),
  () => import("./commands/eval.ts"),
  () => import("./commands/train.ts"),
  () => import("./commands/report.ts"),
  () => import("./commands/view.ts"),
  () => import("./commands/policy.ts"),
  () => import("./commands/sft.ts"),
  () => import("./commands/feeder.ts"),
  () => import("./commands/rollout.ts"),
  () => import("./commands/trainer.ts"),
  () => import("./commands/gateway.ts"),
];

async function main(argv: string[]): Promise<void> {
  const program = new Command("agentrl")
    .description("Multi-turn, multi-task agentic RL on queues and object stores (AgentRL in TypeScript)")
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();
  for (const load of COMMANDS) (await load()).register(program);
  await program.parseAsync(argv);
}

main(process.argv).catch((error: unknown) => {
  if (error instanceof CommanderError) process.exit(error.exitCode);
  if (error instanceof ValidationError) {
    process.stderr.write(`agentrl: ${error.message}\n`);
    process.exit(2);
  }
  if (error instanceof AgentRlError) {
    process.stderr.write(`agentrl: ${error.message}\n`);
    process.exit(1);
  }
  process.stderr.write(
    `agentrl: unexpected error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
