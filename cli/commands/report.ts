import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { parseJsonOrThrow, ValidationError } from "../../shared/errors.ts";
import { EvalReport } from "../../shared/protocol/metrics.ts";
import { writeRunReport } from "../report/report.ts";
import { displayPath } from "../runFolder.ts";

/** `agentrl report RUN_DIR`: rebuild a run's HTML report from its metrics.jsonl and eval-*.json. */
export function register(program: Command): void {
  program
    .command("report")
    .description("rebuild <run>/report.html from the run's metrics.jsonl and eval-*.json")
    .argument("<run-dir>", "a run folder written by `agentrl train` / `npm start`")
    .action(async (dir: string) => {
      const runDir = resolve(dir);
      if (!existsSync(join(runDir, "metrics.jsonl")) && !existsSync(join(runDir, "config.json")))
        throw new ValidationError("run folder", [
          {
            path: "<run-dir>",
            message: `${dir} is not a run folder (no metrics.jsonl or config.json); give the folder \`npm start\` or \`agentrl train\` printed`,
          },
        ]);
      const evals = readdirSync(runDir)
        .filter((f) => /^eval-.*\.json$/.test(f))
        .sort()
        .map((f) => parseJsonOrThrow(EvalReport, readFileSync(join(runDir, f), "utf8"), f));
      const file = await writeRunReport(runDir, evals, [["run folder", runDir]]);
      process.stdout.write(`${displayPath(file)}\n`);
    });
}
