import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { AgentRlError, parseJsonOrThrow } from "../../shared/errors.ts";
import { EvalReport } from "../../shared/protocol/metrics.ts";
import { writeRunReport } from "../report/report.ts";

/** `agentrl report RUN_DIR`: rebuild a run's HTML report from its metrics.jsonl and eval-*.json. */
export function register(program: Command): void {
  program
    .command("report")
    .description("rebuild <run>/report.html from the run's metrics.jsonl and eval-*.json")
    .argument("<run-dir>", "a run folder written by `agentrl train` / `npm start`")
    .action(async (dir: string) => {
      const runDir = resolve(dir);
      if (!existsSync(join(runDir, "metrics.jsonl")) && !existsSync(join(runDir, "config.json")))
        throw new AgentRlError(`${runDir} is not a run folder (no metrics.jsonl or config.json)`);
      const evals = readdirSync(runDir)
        .filter((f) => /^eval-.*\.json$/.test(f))
        .sort()
        .map((f) => parseJsonOrThrow(EvalReport, readFileSync(join(runDir, f), "utf8"), f));
      const file = await writeRunReport(runDir, evals, [["run folder", runDir]]);
      process.stdout.write(`${file}\n`);
    });
}
