import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SKIP_LOG_ENV } from "./requirements.ts";

/**
 * vitest global setup: collects the tests skipped for a missing system tool and prints them, with
 * their install commands, as the run's last lines.
 */
export default function setup(): () => void {
  const dir = mkdtempSync(join(tmpdir(), "agentrl-skips-"));
  const log = join(dir, "skipped.txt");
  process.env[SKIP_LOG_ENV] = log;
  return () => {
    let lines: string[] = [];
    try {
      lines = [...new Set(readFileSync(log, "utf8").split("\n").filter(Boolean))];
    } catch {
      // nothing was skipped
    }
    rmSync(dir, { recursive: true, force: true });
    if (lines.length === 0) return;
    process.stdout.write(
      `\n${lines.length} test file(s) skipped for a missing system tool (CI=true fails instead):\n${lines.map((l) => `  ${l}`).join("\n")}\n`,
    );
  };
}
