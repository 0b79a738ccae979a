import { type Command, InvalidArgumentError } from "commander";
import { createLogger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import type { TrajectoryReady } from "../../shared/protocol/messages.ts";
import { type MetricsCliOptions, startRoleMetrics, withMetricsOptions } from "../metricsOptions.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";

/** `agentrl rollout`: a rollout worker (agent loop with cross-policy sampling) until stopped. */
export function register(program: Command): void {
  withMetricsOptions(
    withConfigOptions(
      program
        .command("rollout")
        .description("consume rollout requests: run episodes against the controller with the policy pool"),
    ),
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
      async (
        options: {
          config?: string;
          set?: string[];
          controllerUrl: string;
          currentUrl: string;
          staleUrl?: string;
          dialect: "agentrl" | "vllm";
        } & MetricsCliOptions,
      ) => {
        const config = await configFromOptions(options);
        const { createRoleTransport } = await import("../../shared/transport/index.ts");
        const { rolloutDepsFromUrls, runRolloutWorker } = await import("../../functions/rollout/index.ts");
        const transport = await createRoleTransport(config, "rollout");
        const roleMetrics = await startRoleMetrics("rollout", options, createLogger({ role: "rollout" }));
        const onReady = roleMetrics ? trajectoryCounters(roleMetrics.metrics) : undefined;
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
          const summary = await runRolloutWorker(config, transport, {
            ...deps,
            signal: stop.signal,
            ...(onReady ? { onReady } : {}),
          });
          process.stdout.write(`${JSON.stringify({ event: "stopped", role: "rollout", ...summary })}\n`);
        } finally {
          await roleMetrics?.close();
          await transport.close();
        }
      },
    );
}

function dialectOption(value: string): "agentrl" | "vllm" {
  if (value === "agentrl" || value === "vllm") return value;
  throw new InvalidArgumentError(`--dialect must be "agentrl" or "vllm", got "${value}"`);
}

/** Trajectories and their tokens per task and status (tokens/s: `rate(agentrl_rollout_tokens_total[1m])`), and their staleness span. */
function trajectoryCounters(metrics: ServiceMetrics): (ready: TrajectoryReady) => void {
  const trajectories = metrics.counter("agentrl_rollout_trajectories_total", "trajectories stored", ["task", "status"]);
  const tokens = metrics.counter("agentrl_rollout_tokens_total", "tokens of stored trajectories", ["task"]);
  const span = metrics.histogram(
    "agentrl_rollout_version_span",
    "policy versions a trajectory's tokens span (max - min): cross-policy sampling and weight updates mid-episode",
    [0, 1, 2, 4, 8, 16],
  );
  return (ready) => {
    trajectories.inc({ task: ready.task, status: ready.status });
    tokens.inc({ task: ready.task }, ready.tokens);
    span.observe(ready.maxVersion - ready.minVersion);
  };
}
