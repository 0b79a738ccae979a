import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { Supervisor } from "../../cli/launch/supervisor.ts";
import { tempDir } from "../support/tmp.ts";

describe("Supervisor", () => {
  it("learns a server role's URL, reports a crash of another role, and stops the rest", async () => {
    const runDir = tempDir("agentrl-supervisor-");
    const supervisor = new Supervisor(runDir);
    supervisor.start({ name: "controller", args: ["controller", "--port", "0"] });
    const url = await supervisor.urlOf("controller");
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    const workers = await fetch(`${url}/api/list_workers`);
    expect(workers.status).toBe(200);

    supervisor.start({ name: "bad-worker", args: ["env", "serve", "no-such-task", "--controller", url] });
    const failure = await supervisor.failure();
    expect(failure.name).toBe("bad-worker");
    expect(failure.code).not.toBe(0);

    const exits = await supervisor.stopAll();
    expect(exits.map((e) => e.name)).toEqual(["bad-worker", "controller"]);
    expect(readFileSync(join(runDir, "logs", "bad-worker.log"), "utf8")).toMatch(/no-such-task/);
    await expect(fetch(`${url}/api/list_workers`)).rejects.toThrow();
  });
});
