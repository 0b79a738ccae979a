import { appendFile, mkdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Command } from "commander";
import { configFromOptions, withConfigOptions } from "../options.ts";

/** `agentrl trainer`: the learner; one JSON line per step on stdout, metrics as JSONL. */
export function register(program: Command): void {
  withConfigOptions(
    program
      .command("trainer")
      .description("train on finished trajectories and publish policies/v{N+1} after every step"),
  )
    .option("--metrics <file>", "metrics JSONL file (default <runDir>/<experimentId>/metrics.jsonl)")
    .action(async (options: { config?: string; set?: string[]; metrics?: string }) => {
      const config = await configFromOptions(options);
      const { createRoleTransport } = await import("../../shared/transport/index.ts");
      const { runTrainer } = await import("../../trainer-image/trainer/index.ts");
      const metricsFile = options.metrics ?? join(config.runDir, config.experimentId, "metrics.jsonl");
      await mkdir(dirname(metricsFile), { recursive: true });
      const transport = await createRoleTransport(config.transport, "trainer");
      const stop = new AbortController();
      process.once("SIGINT", () => stop.abort());
      process.once("SIGTERM", () => stop.abort());
      process.stdout.write(`${JSON.stringify({ event: "started", role: "trainer", metrics: metricsFile })}\n`);
      try {
        const summary = await runTrainer(config, transport, {
          signal: stop.signal,
          metrics: (line) => appendFile(metricsFile, `${JSON.stringify(line)}\n`),
          onStep: (info) =>
            process.stdout.write(
              `${JSON.stringify({ event: "step", step: info.step, version: info.version, trajectories: info.trajectories, loss: info.metrics["loss/total"] })}\n`,
            ),
        });
        process.stdout.write(`${JSON.stringify({ event: "stopped", role: "trainer", ...summary })}\n`);
      } finally {
        await transport.close();
      }
    });
}
