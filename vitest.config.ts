import { defineConfig } from "vitest/config";
import LongFirstSequencer from "./test/support/sequencer.ts";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts", "env-images/**/*.test.ts"],
    // Prints, last, the test files skipped for a missing system tool and how to install it.
    globalSetup: ["test/support/skipSummary.ts"],
    // Suites spawn servers and child processes; run files in parallel on 2 cores but keep slack.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    sequence: { sequencer: LongFirstSequencer },
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    reporters: process.env.CI ? ["default"] : ["default"],
  },
});
