import { spawn } from "node:child_process";
import { EventEmitter } from "node:events";
import { describe, expect, it } from "vitest";
import { exitOnStopSignal } from "../../cli/stopSignals.ts";
import { createLogger } from "../../shared/log.ts";

/** Runs exitOnStopSignal on a fake process; resolves with the exit code and the log lines. */
async function stopWith(close: () => Promise<unknown>, deadlineSeconds = 0.2) {
  const signals = new EventEmitter();
  const written: string[] = [];
  const log = createLogger({ role: "test" }, { write: (line: string) => written.push(line) });
  log.level = "info";
  const exited = new Promise<number>((resolve) => {
    exitOnStopSignal(close, {
      log,
      deadlineSeconds,
      exit: resolve,
      signals: signals as unknown as Pick<NodeJS.Process, "once">,
    });
  });
  const started = Date.now();
  signals.emit("SIGTERM");
  signals.emit("SIGTERM"); // a second signal does not start a second close
  const code = await exited;
  const lines = written.map((line) => JSON.parse(line) as { level: number; msg: string; err?: unknown });
  return { code, seconds: (Date.now() - started) / 1000, lines };
}

describe("exitOnStopSignal", () => {
  it("closes once and exits 0", async () => {
    let closes = 0;
    const { code, lines } = await stopWith(async () => {
      closes += 1;
    });
    expect(code).toBe(0);
    expect(closes).toBe(1);
    expect(lines.map((l) => l.msg)).toContain("closed");
  });

  it("exits 1 and logs why when closing fails", async () => {
    const { code, lines } = await stopWith(() => Promise.reject(new Error("store unreachable")));
    expect(code).toBe(1);
    const failed = lines.find((l) => l.msg === "closing failed");
    expect(failed?.err).toMatchObject({ message: "store unreachable" });
  });

  it("exits 0 at the deadline with a warning when closing hangs, instead of waiting for SIGKILL", async () => {
    const { code, seconds, lines } = await stopWith(() => new Promise(() => undefined), 0.2);
    expect(code).toBe(0);
    expect(seconds).toBeGreaterThanOrEqual(0.15);
    expect(lines.find((l) => l.level === 40)?.msg).toMatch(/still closing 0.2 s after SIGTERM/);
  });
});

/** A Node child that runs `body` after installing exitOnSignalUntilHandled; resolves with its exit. */
function child(body: string): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string }> {
  const script = `
    import { exitOnSignalUntilHandled } from ${JSON.stringify(new URL("../../cli/stopSignals.ts", import.meta.url).pathname)};
    exitOnSignalUntilHandled();
    ${body}
    setInterval(() => undefined, 1000);
    process.stdout.write("ready\\n");`;
  const proc = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let stdout = "";
  return new Promise((resolve) => {
    proc.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
      if (stdout.includes("ready") && !stdout.includes("sent")) {
        stdout += "sent\n";
        proc.kill("SIGTERM");
      }
    });
    proc.on("exit", (code, signal) => resolve({ code, signal, stdout }));
  });
}

describe("exitOnSignalUntilHandled (a container's PID 1 has no default SIGTERM action)", () => {
  it("exits 0 on SIGTERM while the role has no handler of its own", async () => {
    const { code, signal } = await child("");
    expect({ code, signal }).toEqual({ code: 0, signal: null });
  }, 30_000);

  it("steps aside once the role handles SIGTERM itself", async () => {
    const { code, stdout } = await child(
      `process.once("SIGTERM", () => { process.stdout.write("role closing\\n"); setTimeout(() => process.exit(3), 50); });`,
    );
    expect(code).toBe(3);
    expect(stdout).toContain("role closing");
  }, 30_000);
});
