import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runProcess } from "../support/cli.ts";

const VITEST = fileURLToPath(new URL("../../node_modules/vitest/vitest.mjs", import.meta.url));
const CONFIG = fileURLToPath(new URL("../fixtures/restore-env/vitest.config.ts", import.meta.url));

describe("test files sharing a process (test/support/restoreEnv.ts)", () => {
  it("a file does not see what the file before it set in process.env, even at its top level", async () => {
    // Two files in one fork, each setting a variable at its top level and expecting the other's
    // to be gone: whichever runs second fails if the first one's write survived.
    const run = await runProcess(process.execPath, [VITEST, "run", "--config", CONFIG], {
      env: { NO_COLOR: "1", FORCE_COLOR: "0" },
      timeoutMs: 90_000,
    });
    const output = run.stdout + run.stderr;
    expect(output).toMatch(/Test Files +2 passed \(2\)/);
    expect(run.status, output).toBe(0);
  }, 120_000);
});
