import { defineConfig } from "vitest/config";
import LongFirstSequencer from "./test/support/sequencer.ts";

const INCLUDE = ["test/**/*.test.ts", "env-images/**/*.test.ts"];

/**
 * Files that need a process of their own: they change process-wide state that the next file in
 * the same process would see (TF.js's backend and engine, the model tests' device state, stubbed
 * globals and timers). They run on the forks pool, each in a fresh child process. Every other
 * file runs on the threads pool, in a worker thread it shares with the files before it, so the
 * modules every file imports (zod schemas, the AWS SDK, aws-cdk-lib, commander) load once per
 * thread instead of once per file; test/support/restoreEnv.ts undoes what a shared file set in
 * process.env (a thread's own copy), and test/support/removeTempDirs.ts removes each file's temp
 * folders. Files in a thread share its process: a test finds its own child processes by something
 * of its own (a run folder, test/support/pipelineRun.ts runPids), never as descendants of
 * process.pid, which are the other thread's too. Whether a pool reuses its workers is vitest's root
 * `poolOptions.<pool>.isolate` (a project's own poolOptions do not reach the pool), hence one pool
 * per kind. A file that fails only after another one in the same thread belongs here.
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
    sequence: { sequencer: LongFirstSequencer },
    // Two files at a time on 2 cores: the shared files first, on two threads, then the own-process
    // files on two forks (each project's sequence.groupOrder; pools of one group run side by side).
    poolOptions: {
      threads: { maxThreads: 2, minThreads: 1, isolate: false },
      forks: { maxForks: 2, minForks: 1 },
    },
    // The watchdog names a test file that runs for minutes, so a run stopped by a time limit says where.
    reporters: ["default", "./test/support/watchdog.ts"],
    projects: [
      {
        extends: true,
        test: {
          name: "own-process",
          include: OWN_PROCESS,
          pool: "forks",
          sequence: { groupOrder: 1 },
          setupFiles: ["test/support/removeTempDirs.ts"],
        },
      },
      {
        extends: true,
        test: {
          name: "shared",
          include: INCLUDE,
          exclude: OWN_PROCESS,
          pool: "threads",
          isolate: false,
          sequence: { groupOrder: 0 },
          setupFiles: ["test/support/restoreEnv.ts", "test/support/removeTempDirs.ts"],
        },
      },
    ],
  },
});
