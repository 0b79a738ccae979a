import { defineConfig } from "vitest/config";
import LongFirstSequencer from "./test/support/sequencer.ts";

const INCLUDE = ["test/**/*.test.ts", "env-images/**/*.test.ts"];

/**
 * Files that need a process of their own: they change process-wide state that the next file in
 * the same process would see (TF.js's backend and engine, the model tests' device state, stubbed
 * globals and timers). Every other file runs in a process it shares with the files before it, so
 * the modules every file imports (zod schemas, the AWS SDK, commander) load once per process
 * instead of once per file; test/support/restoreEnv.ts undoes what a shared file set in
 * process.env. A file that fails only after another one in the same process belongs here.
 */
export const OWN_PROCESS = [
  "test/model/*.test.ts",
  "test/policy-server/*.test.ts",
  "test/rl/*.test.ts",
  "test/roles/*.test.ts",
  "test/gateway/*.test.ts",
  "test/security/*.test.ts",
  "test/bench/*.test.ts",
  "test/evaluator/*.test.ts",
  "test/agentbench/fetch.test.ts",
  "test/env/idlePool.test.ts",
  "test/unit/quickstart.test.ts",
];

export default defineConfig({
  test: {
    // Prints, last, the test files skipped for a missing system tool and how to install it.
    globalSetup: ["test/support/skipSummary.ts"],
    // Suites spawn servers and child processes; run files in parallel on 2 cores but keep slack.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    sequence: { sequencer: LongFirstSequencer },
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    // The watchdog names a test file that runs for minutes, so a run stopped by a time limit says where.
    reporters: ["default", "./test/support/watchdog.ts"],
    projects: [
      {
        extends: true,
        test: { name: "own-process", include: OWN_PROCESS },
      },
      {
        extends: true,
        test: {
          name: "shared",
          include: INCLUDE,
          exclude: OWN_PROCESS,
          setupFiles: ["test/support/restoreEnv.ts"],
          poolOptions: { forks: { isolate: false } },
        },
      },
    ],
  },
});
