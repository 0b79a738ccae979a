import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { Hono } from "hono";
import { afterAll, describe, expect, it } from "vitest";
import { loadConfig } from "../../shared/config/index.ts";
import { listen } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { PolicyClient, type PolicyEndpoint, PolicyRequestError } from "../../shared/policy/client.ts";
import { ChatCompletionResponse, POLICY_VERSION_HEADER } from "../../shared/protocol/openai.ts";
import { MemoryObjectStore } from "../../shared/transport/memory.ts";
import { servePolicy } from "../../trainer-image/policy-server/serve.ts";
import { AGENTRL_BIN, agentrl, runProcess } from "../support/cli.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { numpyMissing, requireOrSkip } from "../support/requirements.ts";
import { tempDir } from "../support/tmp.ts";

const hasNumpy = requireOrSkip("hf-dialect.test.ts", "numerics against the numpy reference forward", numpyMissing());
const REFERENCE = fileURLToPath(new URL("../fixtures/hf_reference.py", import.meta.url));
const messages = [{ role: "user" as const, content: "What is 2 + 3?" }];

const children: ChildProcess[] = [];
afterAll(() => {
  for (const child of children.splice(0)) child.kill("SIGTERM");
});

/** Starts `agentrl policy serve` and returns its URL once it prints the listening line. */
async function serve(args: string[], cwd: string): Promise<string> {
  const child = spawn(process.execPath, [AGENTRL_BIN, "policy", "serve", "--port", "0", ...args], {
    cwd,
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  let stdout = "";
  child.stdout.setEncoding("utf8");
  for (;;) {
    const [chunk] = (await Promise.race([once(child.stdout, "data"), once(child, "exit")])) as [unknown];
    if (typeof chunk !== "string") throw new Error(`policy serve exited: ${stderr}`);
    stdout += chunk;
    const line = stdout.split("\n").find((l) => l.includes('"event":"listening"'));
    if (line) return (JSON.parse(line) as { url: string }).url;
  }
}

async function reference(dir: string, ids: number[], temperature: number): Promise<number[]> {
  const run = await runProcess("python3", [REFERENCE, dir, String(temperature), JSON.stringify([ids])]);
  expect(run.stderr).toBe("");
  return (JSON.parse(run.stdout) as number[][])[0]!;
}

describe.skipIf(!hasNumpy)("serving an imported Hugging Face model in the vLLM dialect", () => {
  it("import-hf then serve --pin: return_token_ids + logprobs match the numpy reference within 1e-3", async () => {
    const work = tempDir("agentrl-hf-serve-");
    const hf = join(work, "tiny-qwen2");
    writeTinyHfFolder(hf, { dtype: "BF16", seed: 9 });
    const imported = await agentrl(["policy", "import-hf", hf, "--out", join(work, "ckpt")]);
    expect(imported.stderr).toBe("");
    expect(imported.status).toBe(0);
    expect(readdirSync(work).sort()).toEqual(["ckpt", "tiny-qwen2"]); // no temp folder left beside --out
    const cli = await serve(
      ["--pin", "--set", `policy.init=${join(work, "ckpt")}`, "--set", "policy.backend=wasm"],
      work,
    );
    // policy.init may also name the Hugging Face folder itself.
    const direct = await servePolicy({
      config: await loadConfig(undefined, { overrides: [`policy.init=${hf}`, "policy.backend=wasm"] }),
      pool: "current",
      follow: false,
      port: 0,
      store: new MemoryObjectStore(),
      log: createLogger({ role: "test" }),
    });
    const temperature = 0.8;
    for (const url of [cli, direct.url]) {
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          messages,
          max_tokens: 12,
          temperature,
          seed: 4,
          logprobs: true,
          return_token_ids: true,
        }),
      });
      expect(response.status).toBe(200);
      expect(response.headers.get(POLICY_VERSION_HEADER)).toBe("0");
      const body = ChatCompletionResponse.parse(await response.json());
      const prompt = body.prompt_token_ids!;
      const generated = body.choices[0]!.token_ids!;
      const logprobs = body.choices[0]!.logprobs!.content.map((c) => c.logprob);
      expect(prompt.length).toBe(body.usage.prompt_tokens);
      expect(generated.length).toBeGreaterThan(0);
      expect(logprobs).toHaveLength(generated.length);
      const expected = await reference(hf, [...prompt, ...generated], temperature);
      generated.forEach((_, t) => {
        expect(Math.abs(logprobs[t]! - expected[prompt.length + t]!)).toBeLessThan(1e-3);
      });
    }
    await direct.close();
  });
});

describe("PolicyClient in the vLLM dialect", () => {
  it("takes ids and log-probs from OpenAI/vLLM fields and the version from the header or the model name", async () => {
    let answer: Record<string, unknown> = {};
    let header: string | undefined;
    const requests: Array<Record<string, unknown>> = [];
    const app = new Hono();
    app.post("/v1/chat/completions", async (c) => {
      requests.push((await c.req.json()) as Record<string, unknown>);
      if (header) c.header(POLICY_VERSION_HEADER, header);
      return c.json(answer);
    });
    const http = await listen(app, 0, "127.0.0.1");
    const endpoint: PolicyEndpoint = {
      pool: "current",
      url: http.url,
      model: "Qwen/Qwen2.5-0.5B-Instruct",
      requiresTrace: true,
      dialect: "vllm",
    };
    const client = new PolicyClient(5_000);
    const request = { messages, tools: [], temperature: 1, topP: 1, maxTokens: 8, promptTokenIds: [1, 2, 3] };
    const vllmAnswer = (model: string, withIds = true) => ({
      id: "chatcmpl-1",
      object: "chat.completion",
      created: 1,
      model,
      prompt_token_ids: [1, 2, 3],
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: "5" },
          finish_reason: "stop",
          logprobs: {
            content: [
              { token: "5", logprob: -0.5, bytes: [53], top_logprobs: [] },
              { token: "<|im_end|>", logprob: -0.25, bytes: null, top_logprobs: [] },
            ],
          },
          ...(withIds ? { token_ids: [20, 258] } : {}),
        },
      ],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
    });
    try {
      answer = vllmAnswer("qwen-v7");
      const byName = await client.generate(endpoint, request);
      expect(byName.trace).toEqual({
        token_ids: [20, 258],
        logprobs: [-0.5, -0.25],
        policy_versions: [7, 7],
        prompt_token_ids: [1, 2, 3],
        prompt_truncated: false,
      });
      expect(requests[0]).toMatchObject({ return_token_ids: true, logprobs: true });
      expect(requests[0]).not.toHaveProperty("agentrl");
      header = "12";
      expect((await client.generate(endpoint, request)).trace?.policy_versions).toEqual([12, 12]);
      header = undefined;
      answer = vllmAnswer("qwen");
      await expect(client.generate(endpoint, request)).rejects.toThrow(/no policy version: send the x-policy-version/);
      answer = vllmAnswer("qwen-v7", false);
      const missing = client.generate(endpoint, request);
      await expect(missing).rejects.toBeInstanceOf(PolicyRequestError);
      await expect(client.generate(endpoint, request)).rejects.toThrow(/choices\[0\]\.token_ids is missing/);
      // An external baseline without ids still acts (its turn is context, not learned from).
      const external = await client.generate({ ...endpoint, requiresTrace: false }, request);
      expect(external.trace).toBeUndefined();
      expect(external.message.content).toBe("5");
    } finally {
      await http.close();
    }
  });
});
