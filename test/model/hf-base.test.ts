import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { baseCheckpointOf } from "../../cli/commands/train.ts";
import { importBase } from "../../cli/launch/pipeline.ts";
import { codecOfVersion } from "../../shared/chat/checkpoint.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { readHfFolder } from "../../shared/model/hf/index.ts";
import { initBackend } from "../../shared/model/index.ts";
import { HF_METADATA_FILE, readManifest } from "../../shared/protocol/checkpoints.ts";
import { MemoryObjectStore } from "../../shared/transport/memory.ts";
import { resolveStartingPolicy } from "../../trainer-image/policy-server/serve.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { tempDir } from "../support/tmp.ts";

const work = tempDir("agentrl-hf-base-");
const hfDir = join(work, "tiny-llama");

beforeAll(async () => {
  await initBackend("wasm");
  writeTinyHfFolder(hfDir, { architecture: "LlamaForCausalLM", seed: 5 });
});

describe("policy.base naming a Hugging Face folder", () => {
  it("a run imports it as v0 with its hf.json, so the chat template and architecture travel on", async () => {
    const config = parseConfig({ policy: { base: hfDir, backend: "wasm" } });
    const base = baseCheckpointOf(config, {});
    expect(base).toBe(resolve(hfDir));
    const store = new MemoryObjectStore();
    await importBase(store, base, config.policy.backend);
    const manifest = await readManifest(store, 0);
    expect(manifest.files.map((f) => f.name)).toContain(HF_METADATA_FILE);
    const loaded = await loadCheckpoint(store, 0);
    try {
      expect(loaded.config).toEqual((await readHfFolder(hfDir)).config);
    } finally {
      loaded.policy.dispose();
    }
    const codec = await codecOfVersion(store, manifest);
    expect(codec.render([{ role: "user", content: "hi" }], undefined, true)).toContain("<|im_start|>assistant\n");
  });

  it("a policy server with an empty store serves it as v0; a folder that is neither kind is refused by name", async () => {
    const config = parseConfig({ policy: { base: hfDir, backend: "wasm" } });
    const starting = await resolveStartingPolicy(config, new MemoryObjectStore(), "current", 1);
    expect(starting.version).toBe(0);
    expect(starting.source).toBe(`base ${hfDir} (the checkpoint store is empty)`);
    expect((await readManifest(starting.store, 0)).files.map((f) => f.name)).toContain(HF_METADATA_FILE);

    const empty = join(work, "empty");
    mkdirSync(empty);
    expect(() => baseCheckpointOf(parseConfig({ policy: { base: empty } }), {})).toThrow(
      /policy\.base: .*empty holds no checkpoint .* and is no Hugging Face model folder/,
    );
  });
});
