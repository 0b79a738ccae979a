import { spawn } from "node:child_process";
import { describe, expect, it } from "vitest";
import { processRuns } from "../../shared/processes.ts";

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
