import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runProcess } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";

const VITEST = fileURLToPath(new URL("../../node_modules/vitest/vitest.mjs", import.meta.url));
const CONFIG = fileURLToPath(new URL("../fixtures/shared-thread/vitest.config.ts", import.meta.url));

/**
 * Two fixture files run in one worker thread, one after the other, with the shared project's setup
 * files (test/support/restoreEnv.ts, test/support/removeTempDirs.ts): what the first leaves behind
 * must not reach the second, and each one's temp folders must be gone when it ends.
 */
describe("test files sharing a worker thread", () => {
  it("a file does not see what the file before it set in process.env, and neither file's temp folders outlive it", async () => {
    const log = join(tempDir("agentrl-shared-thread-log-"), "dirs.txt");
    const run = await runProcess(process.execPath, [VITEST, "run", "--config", CONFIG], {
      env: { NO_COLOR: "1", FORCE_COLOR: "0", AGENTRL_TEMP_DIR_LOG: log },
      timeoutMs: 90_000,
    });
    const output = run.stdout + run.stderr;
    // Each file sets a variable at its top level and expects the other's to be gone: whichever
    // runs second fails if the first one's write survived.
    expect(output).toMatch(/Test Files +2 passed \(2\)/);
    expect(run.status, output).toBe(0);
    const dirs = readFileSync(log, "utf8").split("\n").filter(Boolean);
    expect(dirs).toHaveLength(2);
    // The second file's folder too, which a hook registered once per thread left behind.
    expect(dirs.filter((dir) => existsSync(dir))).toEqual([]);
  }, 120_000);
});
