import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { type AddressInfo, createServer } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { Supervisor, waitFor, withAnnouncedPort } from "../../cli/launch/supervisor.ts";
import { SUPERVISOR_PID_ENV } from "../../cli/supervisorWatch.ts";
import {
  DATA_PARALLEL_NODE_FLAGS,
  missingNodeFlags,
  nodeFlagsForThreads,
} from "../../shared/model/dataParallelFlags.ts";
import { tempDir } from "../support/tmp.ts";

const AGENTRL_BIN = fileURLToPath(new URL("../../bin/agentrl.mjs", import.meta.url));

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

  it("waits through the restart of a server that died before listening, and quotes its stderr when none is left", async () => {
    // The port is taken when the controller first starts: that launch exits on EADDRINUSE.
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const port = (blocker.address() as AddressInfo).port;
    const supervisor = new Supervisor(tempDir("agentrl-supervisor-restart-"));
    try {
      supervisor.start({ name: "once", args: ["controller", "--port", String(port)] });
      await expect(supervisor.urlOf("once")).rejects.toThrow(
        /^once exited \(code 1, signal null\) before listening; see \S+once\.log; the end of its stderr:\n[\s\S]*EADDRINUSE/,
      );
      supervisor.start({ name: "restarted", args: ["controller", "--port", String(port)], maxRestarts: 3 });
      const url = supervisor.urlOf("restarted");
      // the first launch has died on the taken port; the port frees before the restart a second later
      await waitFor("the first launch's exit", async () => supervisor.restartsOf("restarted") === 1, 30_000);
      await new Promise((resolve) => blocker.close(resolve));
      expect(await url).toBe(`http://127.0.0.1:${port}`);
    } finally {
      blocker.close();
      await supervisor.stopAll();
    }
  });

  it("restarts a server started on port 0 on the port it announced, so its URL stays valid", async () => {
    const supervisor = new Supervisor(tempDir("agentrl-supervisor-port0-"));
    try {
      supervisor.start({ name: "controller", args: ["controller", "--port", "0"], maxRestarts: 1 });
      const url = await supervisor.urlOf("controller");
      const port = new URL(url).port;
      expect(Number(port)).toBeGreaterThan(0);
      const first = supervisor.pidOf("controller") as number;
      process.kill(first, "SIGKILL");
      await waitFor("the restart", async () => supervisor.restartsOf("controller") === 1, 30_000);
      await waitFor("the restarted controller", async () => supervisor.pidOf("controller") !== first, 30_000);
      const argv = readFileSync(`/proc/${supervisor.pidOf("controller")}/cmdline`, "utf8").split("\0");
      expect(argv.slice(argv.indexOf("--port"), argv.indexOf("--port") + 2)).toEqual(["--port", port]);
      await waitFor(
        "the restarted controller to answer at the first URL",
        // any answer: the restarted controller listens there
        async () => (await fetch(`${url}/api/get_tasks`).catch(() => undefined)) !== undefined,
        30_000,
      );
    } finally {
      await supervisor.stopAll();
    }
  });

  it("replaces only a --port 0 with the announced port", () => {
    const url = "http://127.0.0.1:43123";
    expect(withAnnouncedPort(["controller", "--port", "0", "--config", "c.json"], url)).toEqual([
      "controller",
      "--port",
      "43123",
      "--config",
      "c.json",
    ]);
    expect(withAnnouncedPort(["controller", "--port", "5020"], url)).toEqual(["controller", "--port", "5020"]);
    expect(withAnnouncedPort(["trainer", "--config", "c.json"], url)).toEqual(["trainer", "--config", "c.json"]);
  });

  it("stopAll ends a readiness wait on its roles at once, rather than at the wait's timeout", async () => {
    const supervisor = new Supervisor(tempDir("agentrl-supervisor-wait-"));
    let probes = 0;
    const waiting = waitFor(
      "a worker that never registers",
      async () => {
        probes += 1;
        return false;
      },
      300_000,
      supervisor.stopSignal,
    );
    const settled = expect(waiting).rejects.toThrow(/stopped while waiting for a worker that never registers/);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const started = Date.now();
    await supervisor.stopAll();
    await settled;
    expect(Date.now() - started).toBeLessThan(30_000); // the wait's own timeout is 300 s
    const probesAtStop = probes;
    await new Promise((resolve) => setTimeout(resolve, 600));
    expect(probes).toBe(probesAtStop); // no probe after the stop
    expect(probesAtStop).toBeGreaterThan(1); // it did poll until then
  });

  it("waits a role's own stop grace before SIGKILL (a pool closing its workers), the call's grace otherwise", async () => {
    const runDir = tempDir("agentrl-supervisor-grace-");
    // Each role's exit after SIGTERM takes 1.5 s, as a pool's does while its workers stop.
    const slowExit = join(runDir, "slow-exit.cjs");
    writeFileSync(
      slowExit,
      // Installed from the first line, before the role's own SIGTERM handler.
      "const exit = process.exit;\nprocess.exit = (code) => setTimeout(() => exit(code), 1500);\nprocess.on('SIGTERM', () => process.exit(0));\n",
    );
    const supervisor = new Supervisor(runDir);
    const slow = { args: ["controller", "--port", "0"], nodeFlags: ["--require", slowExit] };
    supervisor.start({ name: "hasty", ...slow });
    supervisor.start({ name: "patient", ...slow, stopGraceMs: 10_000 });
    await Promise.all([supervisor.urlOf("hasty"), supervisor.urlOf("patient")]);
    const exits = await supervisor.stopAll(300);
    expect(exits).toEqual([
      { name: "patient", code: 0, signal: null },
      { name: "hasty", code: null, signal: "SIGKILL" },
    ]);
  });

  it.skipIf(process.platform !== "linux")("gives a role's node flags to node itself, before the script", async () => {
    const supervisor = new Supervisor(tempDir("agentrl-supervisor-flags-"));
    supervisor.start({ name: "controller", args: ["controller", "--port", "0"], nodeFlags: DATA_PARALLEL_NODE_FLAGS });
    try {
      await supervisor.urlOf("controller");
      const pid = supervisor.pidOf("controller") as number;
      const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean);
      // node <flags> bin/agentrl.mjs controller …: V8 takes these flags only on node's own command line
      expect(argv.slice(1, 1 + DATA_PARALLEL_NODE_FLAGS.length)).toEqual([...DATA_PARALLEL_NODE_FLAGS]);
      expect(argv[1 + DATA_PARALLEL_NODE_FLAGS.length]).toMatch(/agentrl\.mjs$/);
      expect(missingNodeFlags(argv.slice(1))).toEqual([]);
      expect(missingNodeFlags(["--single-threaded-gc"])).toEqual(["--max-semi-space-size=64"]);
      // what the launcher gives the trainer: the flags only when it trains over threads
      expect(nodeFlagsForThreads(1)).toEqual([]);
      expect(nodeFlagsForThreads(2)).toEqual(DATA_PARALLEL_NODE_FLAGS);
      // and its own pid, which the role watches (below)
      const environment = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0");
      expect(environment).toContain(`${SUPERVISOR_PID_ENV}=${process.pid}`);
    } finally {
      await supervisor.stopAll();
    }
  });

  it.skipIf(process.platform !== "linux")(
    "a role stops through its SIGTERM handling once its launcher is gone, even SIGKILLed",
    async () => {
      // A stand-in launcher: a process that is killed without stopping anything.
      const launcher = spawn("sleep", ["300"], { stdio: "ignore" });
      const role = spawn(process.execPath, [AGENTRL_BIN, "controller", "--port", "0"], {
        env: { ...process.env, AGENTRL_LOG_LEVEL: "info", [SUPERVISOR_PID_ENV]: String(launcher.pid) },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let output = "";
      for (const stream of [role.stdout, role.stderr])
        stream.on("data", (chunk: Buffer) => {
          output += chunk.toString();
        });
      const exited = new Promise<number | null>((resolve) => role.once("exit", (code) => resolve(code)));
      try {
        await waitFor("the controller to listen", () => Promise.resolve(output.includes('"event":"listening"')));
        // alive while its launcher runs
        await new Promise((r) => setTimeout(r, 1_500));
        expect(role.exitCode).toBeNull();
        launcher.kill("SIGKILL");
        const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r("still running"), 20_000))]);
        expect(code).toBe(0);
        expect(output).toMatch(/"signal":"SIGTERM".*"msg":"closed"/);
      } finally {
        launcher.kill("SIGKILL");
        role.kill("SIGKILL");
      }
    },
    90_000,
  );
});
