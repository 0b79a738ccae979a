import { type Command, InvalidArgumentError } from "commander";
import { configFromOptions, withConfigOptions } from "../options.ts";

/** `agentrl rollout`: a rollout worker (agent loop with cross-policy sampling) until stopped. */
export function register(program: Command): void {
  withConfigOptions(
    program
      .command("rollout")
      .description("consume rollout requests: run episodes against the controller with the policy pool"),
  )
    .requiredOption("--controller-url <url>", "environment controller, e.g. http://127.0.0.1:5020")
    .requiredOption("--current-url <url>", "policy server following the newest version (OpenAI base URL)")
    .option("--stale-url <url>", "policy server following every K-th version (cross-policy pool)")
    .option(
      "--dialect <dialect>",
      "how the current/stale servers report tokens: agentrl (our policy server) or vllm (return_token_ids + logprobs)",
      dialectOption,
      "agentrl" as const,
    )
    .action(
      async (options: {
        config?: string;
        set?: string[];
        controllerUrl: string;
        currentUrl: string;
        staleUrl?: string;
        dialect: "agentrl" | "vllm";
      }) => {
        const config = await configFromOptions(options);
        const { createRoleTransport } = await import("../../shared/transport/index.ts");
        const { rolloutDepsFromUrls, runRolloutWorker } = await import("../../functions/rollout/index.ts");
        const transport = await createRoleTransport(config, "rollout");
        const stop = new AbortController();
        process.once("SIGINT", () => stop.abort());
        process.once("SIGTERM", () => stop.abort());
        try {
          const deps = await rolloutDepsFromUrls(
            config,
            transport,
            {
              controller: options.controllerUrl,
              current: options.currentUrl,
              stale: options.staleUrl,
              dialect: options.dialect,
            },
            stop.signal,
          );
          process.stdout.write(`${JSON.stringify({ event: "started", role: "rollout" })}\n`);
          const summary = await runRolloutWorker(config, transport, { ...deps, signal: stop.signal });
          process.stdout.write(`${JSON.stringify({ event: "stopped", role: "rollout", ...summary })}\n`);
        } finally {
          await transport.close();
        }
      },
    );
}

function dialectOption(value: string): "agentrl" | "vllm" {
  if (value === "agentrl" || value === "vllm") return value;
  throw new InvalidArgumentError(`--dialect must be "agentrl" or "vllm", got "${value}"`);
}
