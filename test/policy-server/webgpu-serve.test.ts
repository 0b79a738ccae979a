import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ChatCompletionResponse } from "../../shared/protocol/openai.ts";
import { AGENTRL_BIN, agentrl } from "../support/cli.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { requireOrSkip, webgpuAdapterMissing } from "../support/requirements.ts";
import { tempDir } from "../support/tmp.ts";

const hasAdapter = requireOrSkip("webgpu-serve.test.ts", "policy serve on webgpu", webgpuAdapterMissing());

const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children.splice(0)) child.kill("SIGTERM");
});

/** Starts `agentrl policy serve`; returns its URL and the name of the backend it logged. */
async function serve(args: string[], cwd: string): Promise<{ url: string; backend: string }> {
  const child = spawn(process.execPath, [AGENTRL_BIN, "policy", "serve", "--port", "0", ...args], {
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
    // Info lines name the backend (under vitest the default level is warn).
    env: { ...process.env, AGENTRL_LOG_LEVEL: "info" },
  });
  children.push(child);
  let output = "";
  for (const stream of [child.stdout, child.stderr])
    stream.setEncoding("utf8").on("data", (chunk: string) => {
      output += chunk;
    });
  // The listening line and the log line naming the backend may come in either order (two streams).
  const exited = once(child, "exit");
  for (;;) {
    const listening = /\{"event":"listening".*\}/.exec(output)?.[0];
    const backend = /"backend":\{"name":"(\w+)"/.exec(output)?.[1];
    if (listening && backend) return { url: (JSON.parse(listening) as { url: string }).url, backend };
    const ended = await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 100, false))]);
    if (ended !== false) throw new Error(`policy serve exited: ${output}`);
  }
}

describe.skipIf(!hasAdapter)("policy serve with policy.backend webgpu (lavapipe here)", () => {
  it("answers with the same tokens as on cpu, and log-probs within 1e-4", async () => {
    const work = tempDir("agentrl-webgpu-serve-");
    const hf = join(work, "tiny-qwen2");
    writeTinyHfFolder(hf, { seed: 5 });
    const imported = await agentrl(["policy", "import-hf", hf, "--out", join(work, "ckpt")]);
    expect(imported.status, imported.stderr).toBe(0);
    const answers = [];
    for (const backend of ["webgpu", "cpu"]) {
      const { url, backend: used } = await serve(
        ["--pin", "--set", `policy.init=${join(work, "ckpt")}`, "--set", `policy.backend=${backend}`],
        work,
      );
      expect(used).toBe(backend);
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          messages: [{ role: "user", content: "What is 2 + 3?" }],
          max_tokens: 8,
          temperature: 0.8,
          seed: 4,
          logprobs: true,
          return_token_ids: true,
        }),
      });
      expect(response.status).toBe(200);
      answers.push(ChatCompletionResponse.parse(await response.json()).choices[0]!);
    }
    const [gpu, cpu] = answers as [(typeof answers)[0], (typeof answers)[0]];
    expect(gpu.token_ids).toHaveLength(8);
    expect(gpu.token_ids).toEqual(cpu.token_ids);
    const logprobs = (c: typeof gpu) => c.logprobs!.content.map((t) => t.logprob);
    logprobs(gpu).forEach((lp, t) => {
      expect(Math.abs(lp - logprobs(cpu)[t]!)).toBeLessThan(1e-4);
    });
  }, 240_000);
});
