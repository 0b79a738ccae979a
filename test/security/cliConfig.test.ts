import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { InteractResponse } from "../../shared/protocol/envApi.ts";
import { AGENTRL_BIN } from "../support/cli.ts";

/**
 * `agentrl controller` and `agentrl env serve` take their limits from `--config` / `--set`:
 * `limits.http` for both servers, `limits.env` for the worker's episodes.
 */

const children: ChildProcess[] = [];

afterEach(() => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
});

/** Spawns `agentrl <args>` and resolves with the `url` of its first stdout line (the "listening" event). */
async function listening(args: readonly string[]): Promise<string> {
  const child = spawn(process.execPath, [AGENTRL_BIN, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, AGENTRL_LOG_LEVEL: "error" },
  });
  children.push(child);
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  return new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`agentrl ${args[0]} did not start: ${stderr}`)), 60_000);
    lines.once("line", (line) => {
      clearTimeout(timer);
      resolve(String((JSON.parse(line) as { url: string }).url));
    });
    child.once("exit", (code) => reject(new Error(`agentrl ${args[0]} exited with ${code}: ${stderr}`)));
  });
}

function post(url: string, body: string): Promise<Response> {
  return fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body });
}

describe("limits from the config on the CLI", () => {
  it("a controller started with --set limits.http.bodyLimitBytes answers 413 past that limit", async () => {
    const url = await listening(["controller", "--port", "0", "--set", "limits.http.bodyLimitBytes=2048"]);
    const big = await post(`${url}/api/start_sample`, JSON.stringify({ name: "x".repeat(4_000), index: 0 }));
    expect(big.status).toBe(413);
    // Under the limit the same request gets past the body check (and fails on its content instead).
    const small = await post(`${url}/api/start_sample`, JSON.stringify({ name: "x".repeat(1_000), index: 0 }));
    expect(small.status).not.toBe(413);
    expect(small.status).toBeGreaterThanOrEqual(400);
  });

  it("an env worker started with --set limits.env.maxToolCallsPerTurn runs no turn with more calls", async () => {
    const url = await listening([
      "env",
      "serve",
      "example",
      "--controller",
      "http://127.0.0.1:59999",
      "--concurrency",
      "2",
      "--set",
      "limits.env.maxToolCallsPerTurn=2",
    ]);
    const started = await post(`${url}/api/start_sample`, JSON.stringify({ index: 0, session_id: 7 }));
    expect(started.status).toBe(200);
    await started.body?.cancel();
    const calls = Array.from({ length: 3 }, (_, i) => ({
      id: `c${i}`,
      type: "function",
      function: { name: "add", arguments: '{"a": 1, "b": 2}' },
    }));
    const turn = await post(
      `${url}/api/interact`,
      JSON.stringify({ session_id: 7, messages: [{ role: "assistant", content: null, tool_calls: calls }] }),
    );
    const result = InteractResponse.parse(await turn.json());
    expect(result.status).toBe("agent invalid action");
    expect(result.messages[0]?.content).toMatch(/3 tool calls in one turn; at most 2/);
  });
});
