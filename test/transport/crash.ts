import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it, type TestContext } from "vitest";
import type { TransportConfig } from "../../shared/config/transport.ts";
import { drain, sleep } from "./conformance.ts";
import { openTransport, type TransportTarget } from "./target.ts";

const CHILDREN = fileURLToPath(new URL("./children/", import.meta.url));

/**
 * Crash safety for one target, with real child processes killed by SIGKILL: a consumer's
 * received messages come back after their visibility timeout, and an interrupted object write
 * never leaves a torn object visible.
 */
export function registerCrashSafety(target: () => TransportTarget, options: { objectBytes: number }): void {
  const open = async (context: TestContext, overrides: Partial<TransportConfig> = {}) => {
    const config = await target().freshConfig(overrides);
    const transport = await openTransport(config);
    context.onTestFinished(() => transport.close());
    return { transport, config };
  };
  const start = (context: TestContext, script: string, env: Record<string, string>) => {
    const child = spawn(process.execPath, ["--import", "tsx", `${CHILDREN}${script}`], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    context.onTestFinished(() => killHard(child));
    return child;
  };

  describe.concurrent("crash safety", () => {
    it("a consumer SIGKILLed while holding messages loses none: they come back after the visibility timeout", async (context) => {
      const { transport, config } = await open(context);
      const queue = transport.queue("rollout-requests");
      const bodies = Array.from({ length: 12 }, (_, i) => `job-${i}`);
      const ids = await queue.sendBatch(bodies);
      const child = start(context, "consumer.ts", {
        AGENTRL_CRASH_CONFIG: JSON.stringify(config),
        AGENTRL_CRASH_COUNT: String(bodies.length),
        AGENTRL_CRASH_VISIBILITY: "5",
      });
      const line = await firstLineMatching(child, /^\{"received"/, 45_000);
      const held = (JSON.parse(line) as { received: string[] }).received;
      expect(new Set(held)).toEqual(new Set(ids));
      await killHard(child);
      // Still hidden right after the crash: nothing to receive without waiting.
      expect(await queue.receive({ maxMessages: 10 })).toEqual([]);
      const back = await drain(queue, bodies.length);
      expect(back.map((m) => m.body).sort()).toEqual([...bodies].sort());
      expect(back.every((m) => m.receiveCount === 2)).toBe(true);
      expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    });

    it("an object write SIGKILLed mid-way leaves each key absent or complete, never torn", async (context) => {
      const { transport, config } = await open(context);
      const store = transport.store("checkpoints");
      const child = start(context, "writer.ts", {
        AGENTRL_CRASH_CONFIG: JSON.stringify(config),
        AGENTRL_CRASH_BYTES: String(options.objectBytes),
      });
      const stdout = collectStdout(child);
      await firstLineMatching(child, /^writing 2$/, 45_000);
      await sleep(Math.floor(Math.random() * 30));
      await killHard(child);
      // The writer may have begun write 3 or later before the kill landed: `big` holds one of the
      // writes it announced (each announcement is printed before its write starts), whole.
      const announced = [...(await stdout).matchAll(/^writing (\d+)$/gm)].map((m) => Number(m[1]));
      expect(announced).toContain(2);
      const big = await store.get("big");
      expect(big).toBeDefined();
      expectWhole(big!, options.objectBytes, announced);
      const versions = await store.list("versions/");
      expect(versions.length).toBeGreaterThanOrEqual(1);
      for (const { key, size } of versions) {
        expect(size, key).toBe(options.objectBytes);
        expectWhole((await store.get(key))!, options.objectBytes, [Number(key.split("/")[1])]);
      }
      expect((await store.list("")).map((o) => o.key).filter((k) => !k.startsWith("versions/"))).toEqual(["big"]);
    });
  });
}

/** Every byte equals one of `fills` and the length is complete. */
function expectWhole(data: Uint8Array, bytes: number, fills: number[]): void {
  expect(data.length).toBe(bytes);
  const fill = data[0]!;
  expect(fills).toContain(fill);
  expect(data.every((b) => b === fill)).toBe(true);
}

function firstLineMatching(child: ChildProcess, pattern: RegExp, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = "";
    let stderr = "";
    const timer = setTimeout(
      () => reject(new Error(`child printed no line matching ${pattern}: ${stderr}`)),
      timeoutMs,
    );
    child.stderr?.on("data", (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-4000);
    });
    child.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split("\n");
      buffered = lines.pop() ?? "";
      const hit = lines.find((line) => pattern.test(line));
      if (hit !== undefined) {
        clearTimeout(timer);
        resolve(hit);
      }
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`child exited (${code ?? signal}) before printing ${pattern}: ${stderr}`));
    });
  });
}

/** Everything the child prints on stdout, once its stream has closed. */
function collectStdout(child: ChildProcess): Promise<string> {
  return new Promise((resolve) => {
    let text = "";
    child.stdout?.on("data", (chunk: Buffer) => {
      text += chunk.toString();
    });
    child.stdout?.once("close", () => resolve(text));
  });
}

async function killHard(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
}
