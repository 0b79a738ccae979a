import { execFileSync } from "node:child_process";
import { appendFile, mkdir, open } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Command } from "commander";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { ValidationError } from "../../shared/errors.ts";
import { createLogger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import { flattenParams, openTrackers, type Tracker } from "../../shared/tracking/index.ts";
import type { Transport } from "../../shared/transport/types.ts";
import type { DemonstrationTrace } from "../../trainer-image/trainer/demonstrations.ts";
import { type MetricsCliOptions, startRoleMetrics, withMetricsOptions } from "../metricsOptions.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";

/** `agentrl trainer`: the learner; one JSON line per step on stdout, metrics as JSONL. */
export function register(program: Command): void {
  withMetricsOptions(
    withConfigOptions(
      program
        .command("trainer")
        .description(
          "train on finished trajectories: a new version every optimizer step, every trainer.checkpointEvery-th published as policies/vN/",
        ),
    ),
  )
    .option("--metrics <file>", "metrics JSONL file (default <runDir>/<experimentId>/metrics.jsonl)")
    .action(async (options: { config?: string; set?: string[]; metrics?: string } & MetricsCliOptions) => {
      const config = await configFromOptions(options);
      const { createRoleTransport } = await import("../../shared/transport/index.ts");
      const { runTrainer } = await import("../../trainer-image/trainer/index.ts");
      const metricsFile = options.metrics ?? join(config.runDir, config.experimentId, "metrics.jsonl");
      await mkdir(dirname(metricsFile), { recursive: true });
      const cut = await dropPartialLastLine(metricsFile);
      if (cut > 0)
        process.stderr.write(
          `${JSON.stringify({ event: "warning", role: "trainer", message: `dropped a partial last line (${cut} bytes) from ${metricsFile}: the trainer was killed while writing it` })}\n`,
        );
      const demonstrations = await collectDemonstrations(config);
      const transport = await createRoleTransport(config, "trainer");
      const stop = new AbortController();
      process.once("SIGINT", () => stop.abort());
      process.once("SIGTERM", () => stop.abort());
      const tracker = startTrackers(config, dirname(metricsFile), transport);
      const roleMetrics = await startRoleMetrics("trainer", options, createLogger({ role: "trainer" }));
      const onStepMetrics = roleMetrics ? stepGauges(roleMetrics.metrics) : undefined;
      // with trainer.demonstrations: the expert episodes tried and kept per task
      const started = { event: "started", role: "trainer", metrics: metricsFile };
      process.stdout.write(
        `${JSON.stringify(demonstrations ? { ...started, demonstrations: demonstrations.episodes } : started)}\n`,
      );
      let status: "FINISHED" | "FAILED" = "FAILED";
      try {
        const summary = await runTrainer(config, transport, {
          signal: stop.signal,
          ...(demonstrations ? { demonstrations: demonstrations.traces } : {}),
          metrics: async (line) => {
            const withDrops =
              tracker.dropped > 0
                ? { ...line, metrics: { ...line.metrics, "tracking/dropped": tracker.dropped } }
                : line;
            await appendFile(metricsFile, `${JSON.stringify(withDrops)}\n`);
            tracker.scalars(line.step, withDrops.metrics);
            onStepMetrics?.(line.step, withDrops.metrics);
          },
          distributions: (step, { advantages, staleness }) => {
            tracker.histogram(step, "advantages", advantages);
            tracker.histogram(step, "staleness", staleness);
          },
          onStep: (info) =>
            process.stdout.write(
              `${JSON.stringify({ event: "step", step: info.step, version: info.version, trajectories: info.trajectories, loss: info.metrics["loss/total"] })}\n`,
            ),
        });
        process.stdout.write(`${JSON.stringify({ event: "stopped", role: "trainer", ...summary })}\n`);
        status = "FINISHED";
      } finally {
        await tracker.finish(status);
        await roleMetrics?.close();
        await transport.close();
      }
    });
}

/**
 * The expert episodes `trainer.demonstrations` imitates (undefined when its coef is 0): each
 * registered task of the mix's expert, on `episodesPerTask` training instances drawn from the
 * experiment's seed, its successful episodes kept (as `agentrl sft` collects them).
 */
async function collectDemonstrations(
  config: ExperimentConfig,
): Promise<{ traces: DemonstrationTrace[]; episodes: Record<string, { episodes: number; kept: number }> } | undefined> {
  const { coef, episodesPerTask } = config.trainer.demonstrations;
  if (coef === 0) return undefined;
  const { TASK_MODULES, loadTaskModule } = await import("../../env-images/registry.ts");
  const names = config.tasks.mix.map((m) => m.name);
  const missing = names.filter((name) => !(name in TASK_MODULES));
  if (missing.length > 0)
    throw new ValidationError("config", [
      {
        path: "trainer.demonstrations.coef",
        message: `is ${coef}, but task(s) ${missing.join(", ")} of tasks.mix have no expert in this build (tasks with one: ${Object.keys(TASK_MODULES).join(", ")}); set it to 0 or train on those tasks`,
      },
    ]);
  const modules = await Promise.all(names.map((name) => loadTaskModule(name)));
  const { collectExpertTraces } = await import("../../trainer-image/sft/sft.ts");
  const { traces, stats } = await collectExpertTraces(modules, episodesPerTask, config.seed);
  return { traces, episodes: Object.fromEntries(stats) };
}

/**
 * The trainer's /metrics: its step and every metric of the newest step as
 * `agentrl_trainer_metric{key}` (staleness, throughput, losses, buffered trajectories). Queue
 * depths come from the feeder, which holds the grant to read them; the trainer does not.
 */
function stepGauges(metrics: ServiceMetrics): (step: number, values: Readonly<Record<string, number>>) => void {
  const stepGauge = metrics.gauge("agentrl_trainer_step", "trainer steps done (the newest step)");
  const values = metrics.gauge("agentrl_trainer_metric", "the newest step's metrics.jsonl values by key", ["key"]);
  return (step, line) => {
    stepGauge.set(step);
    for (const [key, value] of Object.entries(line)) if (Number.isFinite(value)) values.set({ key }, value);
  };
}

/**
 * The configured trackers (tracking.*), given the run's flattened config as params and its git
 * commit as a tag. A tracker's failures are one warning line and `tracking/dropped`; never a failed step.
 */
export function startTrackers(config: ExperimentConfig, runFolder: string, transport: Transport): Tracker {
  const tracker = openTrackers(config.tracking, {
    runFolder,
    runName: config.experimentId,
    env: process.env,
    // on AWS the run folder is the task's own disk: TensorBoard goes to the trajectory bucket
    ...(config.transport.kind === "aws" ? { tensorboardStore: transport.store("trajectories") } : {}),
    warn: (message) => process.stdout.write(`${JSON.stringify({ event: "warning", role: "trainer", message })}\n`),
  });
  const commit = gitCommit();
  tracker.params(flattenParams(config), commit ? { "mlflow.source.git.commit": commit } : {});
  return tracker;
}

/** The code's commit: AGENTRL_GIT_COMMIT (images have no .git), else `git rev-parse HEAD`, else none. */
function gitCommit(): string | undefined {
  if (process.env.AGENTRL_GIT_COMMIT) return process.env.AGENTRL_GIT_COMMIT;
  try {
    return (
      execFileSync("git", ["rev-parse", "HEAD"], { stdio: ["ignore", "pipe", "ignore"] })
        .toString()
        .trim() || undefined
    );
  } catch {
    return undefined;
  }
}

/**
 * A trainer killed while appending can leave a line without its newline; the next append would
 * glue a whole line to it and make both unreadable. Cuts the partial line; returns the bytes cut.
 */
export async function dropPartialLastLine(file: string): Promise<number> {
  const handle = await open(file, "r+").catch(() => undefined);
  if (!handle) return 0;
  try {
    const { size } = await handle.stat();
    if (size === 0) return 0;
    const chunk = 64 * 1024;
    let end = size;
    // find the last newline, reading backwards a chunk at a time
    while (end > 0) {
      const start = Math.max(0, end - chunk);
      const buffer = Buffer.alloc(end - start);
      await handle.read(buffer, 0, buffer.length, start);
      const at = buffer.lastIndexOf(0x0a);
      if (at >= 0) {
        const keep = start + at + 1;
        if (keep < size) await handle.truncate(keep);
        return size - keep;
      }
      end = start;
    }
    await handle.truncate(0);
    return size;
  } finally {
    await handle.close();
  }
}
