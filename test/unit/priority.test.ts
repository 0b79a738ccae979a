import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { getPriority } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { addNiceness, EQUAL_NICENESS, nicenessFor, RoleNiceness, roleKind } from "../../cli/launch/priority.ts";
import { Supervisor } from "../../cli/launch/supervisor.ts";
import { tempDir } from "../support/tmp.ts";

/** Niceness of every thread of a process (field 19 of /proc/<pid>/task/<tid>/stat). */
function threadNiceness(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`).map((tid) => {
    const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
    // fields after the command name "(...)": state is field 3, nice is field 19
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
  });
}

const onLinux = process.platform === "linux";

describe("role priorities", () => {
  it("names map to the kind whose niceness they get", () => {
    expect(["trainer", "sft", "rollout-0", "policy-current", "policy-stale", "feeder"].map(roleKind)).toEqual([
      "trainer",
      "trainer",
      "rollout",
      "policy",
      "policy",
      "feeder",
    ]);
    expect(["controller", "env-latency", "envpool-db"].map(roleKind)).toEqual(["env", "env", "env"]);
    // the closing evaluation runs alone: its servers keep the launcher's niceness
    expect(roleKind("policy-eval-v3")).toBeUndefined();
    const defaults = RoleNiceness.parse({});
    expect(nicenessFor(defaults, "trainer")).toBe(0);
    expect(nicenessFor({ ...defaults, trainer: 5 }, "trainer")).toBe(5);
    expect(nicenessFor(defaults, "rollout-1")).toBe(0);
    expect(nicenessFor({ ...EQUAL_NICENESS, policy: 2 }, "policy-current")).toBe(2);
  });

  it("refuses niceness outside 0..19 (a process cannot lower it without privileges)", () => {
    expect(RoleNiceness.safeParse({ trainer: -1 }).success).toBe(false);
    expect(RoleNiceness.safeParse({ trainer: 20 }).success).toBe(false);
    expect(RoleNiceness.safeParse({ trainers: 3 }).success).toBe(false);
  });

  it.runIf(onLinux)("addNiceness sets every thread of a running process", async () => {
    const child = spawn(process.execPath, ["-e", "setTimeout(() => {}, 20000)"], { stdio: "ignore" });
    try {
      // let Node start its platform threads first (they must be set too): on a loaded machine
      // that takes longer than any fixed wait, so wait until it has them
      const pid = child.pid as number;
      const started = Date.now();
      while (readdirSync(`/proc/${pid}/task`).length < 2 && Date.now() - started < 20_000)
        await new Promise((r) => setTimeout(r, 50));
      const own = getPriority();
      const result = addNiceness(pid, 3);
      expect(result).toEqual({ niceness: Math.min(19, own + 3) });
      const nice = threadNiceness(pid);
      expect(nice.length).toBeGreaterThan(1);
      expect(new Set(nice)).toEqual(new Set([Math.min(19, own + 3)]));
    } finally {
      child.kill("SIGKILL");
    }
  });

  it.runIf(onLinux)("the supervisor starts a role at its niceness and says so in its log", async () => {
    const runDir = tempDir("agentrl-priority-");
    const supervisor = new Supervisor(runDir, process.env, { nicenessOf: (name) => (name === "slow" ? 4 : 0) });
    try {
      supervisor.start({ name: "slow", args: ["controller", "--port", "0"] });
      supervisor.start({ name: "plain", args: ["controller", "--port", "0"] });
      await Promise.all([supervisor.urlOf("slow"), supervisor.urlOf("plain")]);
      const own = getPriority();
      expect(new Set(threadNiceness(supervisor.pidOf("slow") as number))).toEqual(new Set([Math.min(19, own + 4)]));
      expect(new Set(threadNiceness(supervisor.pidOf("plain") as number))).toEqual(new Set([own]));
      expect(readFileSync(join(runDir, "logs", "slow.log"), "utf8")).toContain(
        `[supervisor] slow runs at niceness ${Math.min(19, own + 4)} (+4)`,
      );
    } finally {
      await supervisor.stopAll();
    }
  });
});
