import { describe, expect, it } from "vitest";
import { agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";

describe("agentrl sft / policy serve: bad input is one clear line, never a stack trace", () => {
  it("explains what is wrong and what is allowed", async () => {
    const runs = await Promise.all([
      agentrl(["sft", "--steps", "1"]),
      agentrl(["sft", "--tasks", "chess", "--out", "/nonexistent-never-written"]),
      agentrl(["policy", "serve", "--pool", "newest"]),
      agentrl(["sft", "--lr", "-1", "--store"]),
      agentrl(["sft", "--init", "/nonexistent-never-written", "--out", "/nonexistent-never-written-either"]),
      agentrl(["sft", "--final-turn-weight", "heavy", "--store"]),
      agentrl(["sft", "--answer-variants", "1.5", "--store"]),
      agentrl(["sft", "--blind-share", "1.5", "--store"]),
      agentrl(["sft", "--blind-share", "0.6", "--prose-share", "0.5", "--store"]),
      agentrl(["sft", "--question-numbers", "--store"]),
      agentrl([
        "sft",
        "--tasks",
        "os",
        "--episodes",
        "4",
        "--out",
        tempDir("sft-kind-"),
        "--without-kinds",
        "line_count",
      ]),
    ]);
    const [
      noOut,
      badTask,
      badPool,
      badLr,
      badInit,
      badWeight,
      badVariants,
      badBlind,
      tooManyHabits,
      numbersAlone,
      badKind,
    ] = runs;
    expect(noOut.status).toBe(2);
    expect(noOut.stderr).toMatch(/--out\/--store: give exactly one: --out DIR or --store/);
    expect(badTask.status).toBe(2);
    expect(badTask.stderr).toMatch(/--tasks: unknown task\(s\) chess; available: .*alfworld/);
    expect(badPool.status).not.toBe(0);
    expect(badPool.stderr).toMatch(/--pool must be "current" or "stale", got "newest"/);
    expect(badLr.stderr).toMatch(/--lr must be a number > 0, got "-1"/);
    expect(badInit.status).toBe(2);
    expect(badInit.stderr).toMatch(/--init: \/nonexistent-never-written holds no checkpoint/);
    expect(badWeight.status).not.toBe(0);
    expect(badWeight.stderr).toMatch(/--final-turn-weight must be a number > 0, got "heavy"/);
    expect(badVariants.status).not.toBe(0);
    expect(badVariants.stderr).toMatch(/--answer-variants must be an integer >= 0, got "1.5"/);
    expect(badBlind.status).not.toBe(0);
    expect(badBlind.stderr).toMatch(/--blind-share must be a number from 0 to 1, got "1.5"/);
    expect(tooManyHabits.status).toBe(2);
    expect(tooManyHabits.stderr).toMatch(/--prose-share: --blind-share 0.6 \+ --prose-share 0.5 is above 1/);
    expect(numbersAlone.status).toBe(2);
    expect(numbersAlone.stderr).toMatch(
      /--question-numbers: renames within the question variants: give --question-variants N/,
    );
    expect(badKind.status).not.toBe(0);
    expect(badKind.stderr).toMatch(/has kind line_count; their kinds: config-value, .*line-count/);
    for (const run of runs) expect(run.stderr).not.toMatch(/\n\s+at /);
  });
});
