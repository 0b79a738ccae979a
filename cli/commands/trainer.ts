import { appendFile, mkdir, open } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Command } from "commander";
import type { TrackingConfig } from "../../shared/config/tracking.ts";
import { TensorBoardWriter } from "../../shared/tracking/tensorboard.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";

/** `agentrl trainer`: the learner; one JSON line per step on stdout, metrics as JSONL. */
export function register(program: Command): void {
  withConfigOptions(
    program
      .command("trainer")
      .description(
        "train on finished trajectories: a new version every optimizer step, every trainer.checkpointEvery-th published as policies/vN/",
      ),
  )
    .option("--metrics <file>", "metrics JSONL file (default <runDir>/<experimentId>/metrics.jsonl)")
    .action(async (options: { config?: string; set?: string[]; metrics?: string }) => {
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
      const transport = await createRoleTransport(config, "trainer");
      const stop = new AbortController();
      process.once("SIGINT", () => stop.abort());
      process.once("SIGTERM", () => stop.abort());
      const tracker = new Trackers(config.tracking, dirname(metricsFile));
      process.stdout.write(`${JSON.stringify({ event: "started", role: "trainer", metrics: metricsFile })}\n`);
      try {
        const summary = await runTrainer(config, transport, {
          signal: stop.signal,
          metrics: async (line) => {
            const withDrops =
              tracker.dropped > 0
                ? { ...line, metrics: { ...line.metrics, "tracking/dropped": tracker.dropped } }
                : line;
            await appendFile(metricsFile, `${JSON.stringify(withDrops)}\n`);
            tracker.scalars(line.step, line.metrics);
          },
          onStep: (info) =>
            process.stdout.write(
              `${JSON.stringify({ event: "step", step: info.step, version: info.version, trajectories: info.trajectories, loss: info.metrics["loss/total"] })}\n`,
            ),
        });
        process.stdout.write(`${JSON.stringify({ event: "stopped", role: "trainer", ...summary })}\n`);
      } finally {
        tracker.close();
        await transport.close();
      }
    });
}

/**
 * The run's trackers beside metrics.jsonl. A tracker that fails is warned about once and its
 * writes are dropped and counted from then on: it never stops a step.
 */
class Trackers {
  private tensorboard: TensorBoardWriter | undefined;
  dropped = 0;
  private warned = false;

  constructor(config: TrackingConfig, runFolder: string) {
    const { enabled, dir } = config.tensorboard;
    if (enabled) this.attempt(() => (this.tensorboard = new TensorBoardWriter(dir ?? join(runFolder, "tensorboard"))));
  }

  scalars(step: number, values: Readonly<Record<string, number>>): void {
    const writer = this.tensorboard;
    if (writer) this.attempt(() => writer.scalars(step, values));
  }

  close(): void {
    this.tensorboard?.close();
  }

  private attempt(write: () => void): void {
    try {
      write();
    } catch (error) {
      this.dropped += 1;
      if (this.warned) return;
      this.warned = true;
      process.stdout.write(
        `${JSON.stringify({ event: "warning", role: "trainer", message: `TensorBoard writes dropped from now on: ${error instanceof Error ? error.message : String(error)}` })}\n`,
      );
    }
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
