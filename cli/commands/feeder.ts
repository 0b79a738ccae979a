import type { Command } from "commander";
import { createLogger } from "../../shared/log.ts";
import { describeQueues } from "../../shared/metrics.ts";
import { type MetricsCliOptions, startRoleMetrics, withMetricsOptions } from "../metricsOptions.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { intOption } from "./controller.ts";

/** `agentrl feeder`: turns the experiment's task mix into rollout requests until stopped. */
export function register(program: Command): void {
  withMetricsOptions(
    withConfigOptions(
      program
        .command("feeder")
        .description(
          "send rollout requests for the task mix (async: ~2 batches in flight; sync: one batch per version)",
        ),
    ),
  )
    .option("--max-groups <n>", "stop once this many groups were sent in total", intOption("--max-groups", 1))
    .action(async (options: { config?: string; set?: string[]; maxGroups?: number } & MetricsCliOptions) => {
      const config = await configFromOptions(options);
      const { createRoleTransport } = await import("../../shared/transport/index.ts");
      const { versionsFromEvents, runFeeder } = await import("../../functions/feeder/index.ts");
      const transport = await createRoleTransport(config, "feeder");
      const roleMetrics = await startRoleMetrics("feeder", options, createLogger({ role: "feeder" }));
      if (roleMetrics)
        describeQueues(roleMetrics.metrics, {
          "rollout-requests": transport.queue("rollout-requests"),
          trajectories: transport.queue("trajectories"),
        });
      const stop = new AbortController();
      process.once("SIGINT", () => stop.abort());
      process.once("SIGTERM", () => stop.abort());
      process.stdout.write(`${JSON.stringify({ event: "started", role: "feeder", mode: config.trainer.mode })}\n`);
      try {
        const summary = await runFeeder(config, transport, {
          signal: stop.signal,
          maxGroups: options.maxGroups,
          ...versionsFromEvents(transport.queue("policy-events"), config.experimentId),
        });
        process.stdout.write(`${JSON.stringify({ event: "stopped", role: "feeder", ...summary })}\n`);
      } finally {
        await roleMetrics?.close();
        await transport.close();
      }
    });
}
