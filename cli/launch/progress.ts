import cliProgress from "cli-progress";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import type { StepMetrics } from "../../shared/protocol/metrics.ts";
import { tasksIn } from "../report/report.ts";

/** Shows a run's progress from its metrics records. */
export interface ProgressView {
  start(config: ExperimentConfig): void;
  update(records: readonly StepMetrics[]): void;
  stop(): void;
}

/** One line per step: what a non-terminal (CI log, file) gets. */
export function stepLine(record: StepMetrics, maxSteps: number): string {
  const m = record.metrics;
  const perTask = tasksIn([record])
    .map((t) => `${t} ${fmtPct(m[`task/${t}/success`])}`)
    .join(" ");
  const rate = m["throughput/trajectories_per_s"];
  return (
    `step ${record.step}/${maxSteps} v${record.version} ` +
    `${rate === undefined ? "" : `${rate.toFixed(2)} traj/s `}` +
    `loss ${fmt(m["loss/total"] ?? m["loss/policy"])} success: ${perTask} ` +
    `(${(record.elapsedSeconds / 60).toFixed(1)} min)`
  );
}

function fmt(value: number | undefined): string {
  return value === undefined ? "–" : value.toFixed(4);
}

function fmtPct(value: number | undefined): string {
  return value === undefined ? "–" : `${Math.round(100 * value)}%`;
}

/**
 * A progress bar on a terminal (steps, trajectories/s, success per task), or one line per
 * trainer step elsewhere; both on stderr so stdout keeps only the final table.
 */
export function createProgressView(stream: NodeJS.WriteStream = process.stderr): ProgressView {
  let maxSteps = 0;
  let printed = 0;
  let bar: cliProgress.SingleBar | undefined;
  return {
    start(config) {
      maxSteps = config.trainer.maxSteps;
      if (!stream.isTTY) {
        stream.write(`training: ${maxSteps} steps; waiting for the first batch of trajectories…\n`);
        return;
      }
      bar = new cliProgress.SingleBar(
        {
          stream,
          format: "train [{bar}] {value}/{total} steps | {rate} traj/s | {tasks}",
          hideCursor: true,
        },
        cliProgress.Presets.shades_classic,
      );
      bar.start(maxSteps, 0, { rate: "–", tasks: "waiting for the first batch…" });
    },
    update(records) {
      const last = records.at(-1);
      if (!last) return;
      if (bar) {
        const tasks = tasksIn([last])
          .map((t) => `${t} ${fmtPct(last.metrics[`task/${t}/success`])}`)
          .join(" ");
        const rate = last.metrics["throughput/trajectories_per_s"];
        bar.update(records.length, { rate: rate === undefined ? "–" : rate.toFixed(2), tasks });
        return;
      }
      for (const record of records.slice(printed)) stream.write(`${stepLine(record, maxSteps)}\n`);
      printed = records.length;
    },
    stop() {
      bar?.stop();
      bar = undefined;
    },
  };
}
