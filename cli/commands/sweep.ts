import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { type Command, InvalidArgumentError } from "commander";
import { AgentRlError } from "../../shared/errors.ts";
import { assertConfigFile } from "../options.ts";

const AGENTRL_BIN = resolve(dirname(fileURLToPath(import.meta.url)), "../../bin/agentrl.mjs");

/** `--runner '["node","x.mjs"]'` (JSON array) or `--runner "node x.mjs"` (split on spaces). */
function runnerOption(value: string): string[] {
  let argv: unknown = value.trim().split(/\s+/);
  if (value.trim().startsWith("[")) {
    try {
      argv = JSON.parse(value);
    } catch {
      throw new InvalidArgumentError(`--runner must be a JSON array of strings or a command line, got ${value}`);
    }
  }
  if (!Array.isArray(argv) || argv.length === 0 || !argv.every((a) => typeof a === "string" && a.length > 0))
    throw new InvalidArgumentError(`--runner must be a non-empty command, got ${value}`);
  return argv as string[];
}

/** `agentrl sweep FILE`: run every grid point of a sweep spec locally, one experiment after another. */
export function register(program: Command): void {
  program
    .command("sweep")
    .description("run a sweep spec (base config + grid over config fields) locally, one experiment per grid point")
    .argument("<file>", "sweep spec (YAML or JSON): name, base, grid, optional schedule")
    .option("--dry-run", "print the grid points and their settings; run nothing")
    .option("--work-dir <dir>", "folder for the points' configs and run folders (default runs/sweeps/<name>)")
    .option(
      "--runner <command>",
      "command that runs one experiment; `--config <file>` is appended (default: agentrl train)",
      runnerOption,
    )
    .option("--fail-fast", "stop at the first failed experiment")
    .option(
      "--results-bucket <bucket>",
      "upload each point's folder to s3://<bucket>/sweeps/<name>/<point>/ (default: $AGENTRL_RESULTS_BUCKET)",
    )
    .action(
      async (
        file: string,
        options: { dryRun?: boolean; workDir?: string; runner?: string[]; failFast?: boolean; resultsBucket?: string },
      ) => {
        const { loadSweepSpec, expandGrid, describeAssignments } = await import("../../shared/config/sweep.ts");
        assertConfigFile(file, "<file>", "a sweep spec (YAML or JSON), e.g. infra/examples/sweep-lr.yaml");
        const spec = await loadSweepSpec(file);
        if (options.dryRun) {
          const points = expandGrid(spec);
          const lines = points.map((p) => `${p.id}\t${describeAssignments(p.assignments)}`);
          process.stdout.write(`sweep ${spec.name}: ${points.length} experiments\n${lines.join("\n")}\n`);
          return;
        }
        const { runSweep, commandRunner, s3Uploader } = await import("../../trainer-image/sweep/run.ts");
        const bucket = options.resultsBucket ?? process.env.AGENTRL_RESULTS_BUCKET;
        const region = process.env.AWS_REGION;
        const endpoint = process.env.AGENTRL_AWS_ENDPOINT;
        const results = await runSweep(spec, {
          runner: commandRunner(options.runner ?? [process.execPath, AGENTRL_BIN, "train"]),
          workDir:
            options.workDir ??
            join(typeof spec.base.runDir === "string" ? spec.base.runDir : "runs", "sweeps", spec.name),
          failFast: options.failFast ?? false,
          ...(bucket
            ? { upload: s3Uploader(spec, { bucket, ...(region ? { region } : {}), ...(endpoint ? { endpoint } : {}) }) }
            : {}),
          onEvent: (event) =>
            process.stderr.write(
              event.kind === "start"
                ? `sweep ${spec.name}: [${event.point.index + 1}/${event.total}] ${event.point.id} ${describeAssignments(event.point.assignments)}\n`
                : `sweep ${spec.name}: ${event.point.id} exited ${event.exitCode}\n`,
            ),
        });
        for (const r of results)
          process.stdout.write(
            `${r.point.id}\t${r.exitCode === 0 ? "ok" : `failed (exit ${r.exitCode})`}\t${(r.durationMs / 1000).toFixed(1)} s\t${r.runDir}\n`,
          );
        const failed = results.filter((r) => r.exitCode !== 0);
        if (failed.length > 0)
          throw new AgentRlError(
            `${failed.length} of ${results.length} experiments failed: ${failed.map((r) => `${r.point.id} (exit ${r.exitCode})`).join(", ")}`,
          );
      },
    );
}
