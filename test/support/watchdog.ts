import { execFileSync } from "node:child_process";
import type { Reporter, TestCase, TestModule } from "vitest/node";
import { SYNC_TIMEOUT_MS } from "./cli.ts";

/** Seconds a test file may run before the watchdog names it (and the test it is in). */
const SLOW_FILE_S = Number(process.env.AGENTRL_WATCHDOG_SLOW_S ?? 300);
/** How often the watchdog looks. */
const EVERY_S = Number(process.env.AGENTRL_WATCHDOG_EVERY_S ?? 60);

interface Running {
  readonly startedAt: number;
  test?: string;
  testStartedAt?: number;
  /** When the watchdog last named this file; it names it again every SLOW_FILE_S. */
  reportedAt?: number;
  psShown?: boolean;
}

/**
 * A reporter that prints nothing while the run is healthy. A test file still running after
 * SLOW_FILE_S seconds is named with the test it is in, and the second time with the process table,
 * so a run that hangs (and is stopped by .ci/run's time limit) says in its own log where it hung.
 */
export default class Watchdog implements Reporter {
  private readonly running = new Map<string, Running>();
  private timer: NodeJS.Timeout | undefined;

  onTestRunStart(): void {
    this.timer = setInterval(() => this.look(), EVERY_S * 1000);
    this.timer.unref();
  }

  onTestModuleStart(module: TestModule): void {
    this.running.set(module.moduleId, { startedAt: Date.now() });
  }

  onTestCaseReady(test: TestCase): void {
    const entry = this.running.get(test.module.moduleId);
    if (!entry) return;
    entry.test = test.fullName;
    entry.testStartedAt = Date.now();
  }

  onTestModuleEnd(module: TestModule): void {
    this.running.delete(module.moduleId);
  }

  onTestRunEnd(): void {
    clearInterval(this.timer);
  }

  /** The lines the watchdog prints for the files running at `now`: empty while none is slow. */
  report(now = Date.now()): string[] {
    const lines: string[] = [];
    for (const [file, entry] of this.running) {
      const runningS = Math.round((now - entry.startedAt) / 1000);
      if (runningS < SLOW_FILE_S) continue;
      if (entry.reportedAt !== undefined && now - entry.reportedAt < SLOW_FILE_S * 1000) continue;
      const inTest =
        entry.test === undefined
          ? "before its first test"
          : `in "${entry.test}" for ${Math.round((now - (entry.testStartedAt ?? now)) / 1000)} s`;
      lines.push(`[watchdog] ${file} has run ${runningS} s, ${inTest}`);
      if (entry.reportedAt !== undefined && !entry.psShown) {
        entry.psShown = true;
        lines.push(...processTable().map((line) => `[watchdog]   ${line}`));
      }
      entry.reportedAt = now;
    }
    return lines;
  }

  private look(): void {
    const lines = this.report();
    if (lines.length > 0) process.stderr.write(`${lines.join("\n")}\n`);
  }
}

function processTable(): string[] {
  try {
    return execFileSync("ps", ["-eo", "pid,ppid,etimes,time,args", "--sort=start_time"], {
      encoding: "utf8",
      timeout: SYNC_TIMEOUT_MS,
    })
      .split("\n")
      .filter(Boolean)
      .map((line) => line.slice(0, 240));
  } catch (error) {
    return [`(ps failed: ${String(error)})`];
  }
}
