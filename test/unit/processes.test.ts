import { spawn } from "node:child_process";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { processRuns } from "../../shared/processes.ts";
import { runPids } from "../support/pipelineRun.ts";
import { tempDir } from "../support/tmp.ts";

describe("processRuns (shared/processes.ts)", () => {
  it("is true for a running process, false for an ended one", async () => {
    expect(processRuns(process.pid)).toBe(true);
    const child = spawn("true");
    await new Promise((resolve) => child.once("exit", resolve));
    expect(processRuns(child.pid as number)).toBe(false);
  });

  it.skipIf(process.platform !== "linux")(
    "is false for a zombie, which a signal check alone takes for alive",
    async () => {
      // `sleep 0.1` ends under a parent (`exec sleep 30`) that never reaps it: a zombie.
      const parent = spawn("sh", ["-c", "sleep 0.1 & echo $!; exec sleep 30"], { stdio: ["ignore", "pipe", "ignore"] });
      try {
        const pid = Number(
          await new Promise<string>((resolve) => parent.stdout.once("data", (d: Buffer) => resolve(d.toString()))),
        );
        await new Promise((r) => setTimeout(r, 600));
        expect(() => process.kill(pid, 0)).not.toThrow();
        expect(processRuns(pid)).toBe(false);
      } finally {
        parent.kill("SIGKILL");
      }
    },
  );
});

describe("runPids (test/support/pipelineRun.ts)", () => {
  it("finds a run's processes by its folder, not another run's started from the same process", async () => {
    // Two "runs" whose roles are both children of this process, as when two test files share a
    // worker thread: a lookup for one must never list (and so kill) the other's.
    const [mine, theirs] = [tempDir("agentrl-run-a-"), tempDir("agentrl-run-b-")];
    const role = (runDir: string) =>
      spawn(
        process.execPath,
        ["-e", "setTimeout(() => {}, 30_000)", "agentrl.mjs", "trainer", "--config", join(runDir, "config.json")],
        {
          stdio: "ignore",
        },
      );
    const children = [role(mine), role(theirs)];
    try {
      await new Promise((r) => setTimeout(r, 300));
      expect(runPids(mine, "agentrl.mjs trainer")).toEqual([children[0]?.pid]);
      expect(runPids(theirs, "agentrl.mjs trainer")).toEqual([children[1]?.pid]);
      expect(runPids(mine, "agentrl.mjs rollout")).toEqual([]);
      // A folder whose name the other's begins with is not the other's.
      expect(runPids(mine.slice(0, -1), "agentrl.mjs trainer")).toEqual([]);
    } finally {
      for (const child of children) child.kill("SIGKILL");
    }
  });
});
