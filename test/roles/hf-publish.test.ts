import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PolicyPool } from "../../functions/rollout/pool.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { createLogger } from "../../shared/log.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { importHfFolder, readHfFolder } from "../../shared/model/hf/index.ts";
import { initBackend } from "../../shared/model/index.ts";
import { PolicyClient } from "../../shared/policy/client.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import { MemoryObjectStore } from "../../shared/transport/memory.ts";
import { servePolicy } from "../../trainer-image/policy-server/serve.ts";
import { hfPublisher } from "../../trainer-image/trainer/hf-publish.ts";
import { publishVersion } from "../../trainer-image/trainer/publish.ts";
import { runProcess } from "../support/cli.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { tempDir } from "../support/tmp.ts";

const REFERENCE = fileURLToPath(new URL("../fixtures/hf_reference.py", import.meta.url));

/** A vLLM-shaped engine: answers the dev-mode /collective_rpc and records what it saw on disk then. */
async function vllmStub(modelDir: string) {
  const calls: Array<{ path: string; body: string; authorization?: string; hadWeights: boolean }> = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => {
      body += chunk;
    });
    req.on("end", () => {
      calls.push({
        path: req.url ?? "",
        body,
        ...(req.headers.authorization ? { authorization: req.headers.authorization } : {}),
        hadWeights: existsSync(join(modelDir, "model.safetensors")) && existsSync(join(modelDir, "config.json")),
      });
      res.writeHead(req.url === "/collective_rpc" ? 200 : 404, { "content-type": "application/json" });
      res.end(JSON.stringify({ results: [null] }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, calls, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}

beforeAll(async () => {
  await initBackend("wasm");
});

describe("policy.exportHf + policy.syncEngines: publish → adapter → engine loads → rollout sees the version", () => {
  const work = tempDir("agentrl-hf-publish-");
  let closeAll: Array<() => Promise<void>> = [];
  afterAll(async () => {
    for (const close of closeAll) await close();
    closeAll = [];
  });

  it("writes policies/v1/hf/, our server (SGLang endpoint) and a vLLM-style engine load it, a dead engine does not stop the publish", async () => {
    const base = join(work, "base-hf");
    const trained = join(work, "trained-hf");
    writeTinyHfFolder(base, { seed: 1 });
    writeTinyHfFolder(trained, { seed: 2 });
    const checkpoints = new LocalObjectStore(join(work, "checkpoints"));
    await importHfFolder(base, checkpoints); // v0: the imported base, with hf.json

    // The engine: our policy server pinned on v0 (only a weight sync can change what it serves).
    const served = await servePolicy({
      config: parseConfig({ policy: { backend: "wasm", maxBatch: 2 } }),
      pool: "current",
      port: 0,
      log: createLogger({ role: "test" }),
      follow: false,
      store: checkpoints,
      apiKey: "engine-key",
    });
    closeAll.push(() => served.close());
    const vllmDir = join(work, "vllm-model");
    const vllm = await vllmStub(vllmDir);
    closeAll.push(() => vllm.close());
    expect(served.version()).toBe(0);

    const config = parseConfig({
      policy: {
        exportHf: true,
        syncEngines: [
          { url: "http://127.0.0.1:9/", dialect: "sglang" }, // nothing listens: refused
          { url: served.url, dialect: "sglang", apiKeyEnv: "TEST_ENGINE_KEY" },
          { url: vllm.url, dialect: "vllm", modelDir: vllmDir, apiKeyEnv: "TEST_ENGINE_KEY" },
        ],
      },
    });
    // The "trained" weights: another folder, published as v1 by the trainer's publish step.
    const trainedStore = new MemoryObjectStore();
    await importHfFolder(trained, trainedStore);
    const loaded = await loadCheckpoint(trainedStore, 0);
    const sent: string[] = [];
    const published = await publishVersion({
      checkpoints,
      events: {
        send: async (body: string) => {
          sent.push(body);
          return `message-${sent.length}`;
        },
      },
      policy: loaded.policy,
      ledger: {
        schemaVersion: 1,
        experimentId: "hf",
        version: 1,
        step: 1,
        referenceVersion: 0,
        consumed: [],
        totals: {},
      },
      parent: 0,
      metrics: {},
      tokenizerJson: loaded.tokenizerJson,
      saveOptimizerState: false,
      hf: hfPublisher(config.policy, { log: createLogger({ role: "test" }), env: { TEST_ENGINE_KEY: "engine-key" } }),
    });
    loaded.policy.dispose();

    // The folder is in the store; hf.json was carried from v0, so the export is a Qwen2 folder in the original layout.
    const keys = (await checkpoints.list("policies/v1/hf/")).map((o) => o.key).sort();
    expect(keys).toEqual(
      ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"].map(
        (f) => `policies/v1/hf/${f}`,
      ),
    );
    expect(JSON.parse((await checkpoints.getText("policies/v1/hf/config.json"))!).architectures).toEqual([
      "Qwen2ForCausalLM",
    ]);
    expect(sent).toHaveLength(1);
    expect(published.hf?.engines.map((e) => e.loaded)).toEqual([false, true, true]);
    expect(published.hf?.engines[0]?.error).toMatch(/127\.0\.0\.1:9/);

    // vLLM: the served folder holds the version's bytes before the reload call.
    expect(vllm.calls).toEqual([
      {
        path: "/collective_rpc",
        body: '{"method":"reload_weights"}',
        authorization: "Bearer engine-key",
        hadWeights: true,
      },
    ]);
    expect(readFileSync(join(vllmDir, "model.safetensors"))).toEqual(
      Buffer.from((await checkpoints.get("policies/v1/hf/model.safetensors"))!),
    );

    // Our server confirmed v1: the rollout's pool now gets v1 tokens, with the trained folder's numerics.
    expect(served.version()).toBe(1);
    const rollout = parseConfig({ rollout: { crossPolicy: { enabled: false } } }).rollout;
    const endpoint = new PolicyPool(rollout, { current: served.url, apiKey: "engine-key" }).draw(() => 0);
    const generation = await new PolicyClient(30_000).generate(endpoint, {
      messages: [{ role: "user", content: "What is 2 + 3?" }],
      tools: [],
      temperature: 1,
      topP: 1,
      maxTokens: 6,
      seed: 4,
    });
    const trace = generation.trace!;
    expect(trace.policy_versions.every((v) => v === 1)).toBe(true);
    const ids = [...trace.prompt_token_ids!, ...trace.token_ids];
    const run = await runProcess("python3", [REFERENCE, trained, "1", JSON.stringify([ids])]);
    const expected = (JSON.parse(run.stdout) as number[][])[0]!;
    trace.logprobs.forEach((logprob, t) => {
      expect(Math.abs(logprob - expected[trace.prompt_token_ids!.length + t]!)).toBeLessThan(1e-3);
    });
    // The exported folder reads back as the trained one.
    expect((await readHfFolder(join(work, "checkpoints", "policies", "v1", "hf"))).config).toEqual(
      (await readHfFolder(trained)).config,
    );
  }, 120_000);

  it("refuses engines without exportHf, vLLM without its model folder, and an unauthenticated weight load", async () => {
    expect(() => parseConfig({ policy: { syncEngines: [{ url: "http://e:30000" }] } })).toThrow(
      /policy\.syncEngines: engines load/,
    );
    expect(() =>
      parseConfig({ policy: { exportHf: true, syncEngines: [{ url: "http://e:8000", dialect: "vllm" }] } }),
    ).toThrow(/policy\.syncEngines\[0\]\.modelDir: a vllm engine/);
    expect(() =>
      parseConfig({ policy: { exportHf: true, syncEngines: [{ url: "http://e:8000", dialect: "trt" }] } }),
    ).toThrow(/policy\.syncEngines\[0\]\.dialect/);
    const base = join(work, "refusals-hf");
    writeTinyHfFolder(base, { seed: 3 });
    const checkpoints = new LocalObjectStore(join(work, "refusals-checkpoints"));
    await importHfFolder(base, checkpoints);
    const served = await servePolicy({
      config: parseConfig({ policy: { backend: "wasm", maxBatch: 1, init: "0" } }),
      pool: "current",
      port: 0,
      log: createLogger({ role: "test" }),
      follow: false,
      store: checkpoints,
      apiKey: "engine-key",
    });
    try {
      const publisher = hfPublisher(
        parseConfig({ policy: { exportHf: true, syncEngines: [{ url: served.url, apiKeyEnv: "UNSET_KEY_X" }] } })
          .policy,
        { log: createLogger({ role: "test" }), env: {} },
      );
      const result = await publisher.publish(checkpoints, 0);
      expect(result.engines[0]).toMatchObject({ loaded: false, error: "apiKeyEnv UNSET_KEY_X is not set" });
      const anonymous = await fetch(`${served.url}/update_weights_from_disk`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model_path: result.localDir, weight_version: 5 }),
      });
      expect(anonymous.status).toBe(401);
      expect(served.version()).toBe(0);
    } finally {
      await served.close();
    }
  }, 60_000);
});
