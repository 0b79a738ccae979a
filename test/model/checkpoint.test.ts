import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import {
  createPolicy,
  decodeSafetensors,
  encodeSafetensors,
  initBackend,
  loadCheckpoint,
  SafetensorsError,
  saveCheckpoint,
} from "../../shared/model/index.ts";
import {
  CheckpointError,
  listVersions,
  newestVersion,
  OPTIMIZER_FILE,
  readManifest,
} from "../../shared/protocol/checkpoints.ts";
import { MemoryStore, SMALL, tokens } from "./support.ts";

beforeAll(async () => {
  await initBackend("wasm");
});

const TOKENIZER = JSON.stringify({ version: "1.0", model: { type: "BPE", vocab: { a: 0 } } });

describe("safetensors", () => {
  it("writes the standard layout and reads it back", () => {
    const tensors = new Map([
      ["b", { shape: [3], data: Float32Array.of(1.5, -2, 3) }],
      ["a.w", { shape: [2, 2], data: Float32Array.of(0.25, 0, -1, 7) }],
    ]);
    const bytes = encodeSafetensors(tensors, { format: "test" });
    const view = new DataView(bytes.buffer, bytes.byteOffset);
    const headerLength = Number(view.getBigUint64(0, true));
    expect((8 + headerLength) % 8).toBe(0);
    const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + headerLength)));
    expect(header.b).toEqual({ dtype: "F32", shape: [3], data_offsets: [0, 12] });
    expect(header["a.w"]).toEqual({ dtype: "F32", shape: [2, 2], data_offsets: [12, 28] });
    expect(header.__metadata__).toEqual({ format: "test" });
    // Raw little-endian float32: 1.5 is 0x3FC00000.
    expect(view.getFloat32(8 + headerLength, true)).toBe(1.5);
    expect(bytes.length).toBe(8 + headerLength + 28);
    const back = decodeSafetensors(bytes);
    expect(back.metadata).toEqual({ format: "test" });
    expect(back.tensors.get("a.w")).toEqual({ shape: [2, 2], data: Float32Array.of(0.25, 0, -1, 7) });
    expect(back.tensors.get("b")?.data).toEqual(Float32Array.of(1.5, -2, 3));
  });

  it("rejects truncated or inconsistent files", () => {
    const bytes = encodeSafetensors(new Map([["w", { shape: [4], data: new Float32Array(4) }]]));
    expect(() => decodeSafetensors(bytes.subarray(0, 5))).toThrow(SafetensorsError);
    expect(() => decodeSafetensors(bytes.subarray(0, bytes.length - 4))).toThrow(/data_offsets \[0, 16\]/);
    const huge = Uint8Array.from(bytes);
    new DataView(huge.buffer).setBigUint64(0, 10_000n, true);
    expect(() => decodeSafetensors(huge)).toThrow(/runs past the end/);
    expect(() => encodeSafetensors(new Map([["w", { shape: [3], data: new Float32Array(4) }]]))).toThrow(/holds 3/);
  });
});

describe("checkpoints", () => {
  it("round-trips weights, config, tokenizer and manifest; the manifest is written last", async () => {
    const store = new MemoryStore();
    const policy = createPolicy(SMALL, 4);
    const manifest = await saveCheckpoint(store, policy, {
      version: 1,
      step: 10,
      parent: 0,
      metrics: { "loss/policy": 0.5 },
      tokenizerJson: TOKENIZER,
    });
    expect(store.writes.at(-1)).toBe("policies/v1/manifest.json");
    expect(store.writes.slice(0, 3).sort()).toEqual([
      "policies/v1/config.json",
      "policies/v1/tokenizer.json",
      "policies/v1/weights.safetensors",
    ]);
    expect(manifest).toMatchObject({
      schemaVersion: 1,
      version: 1,
      step: 10,
      parent: 0,
      metrics: { "loss/policy": 0.5 },
    });
    expect(manifest.files.map((f) => f.name)).toEqual(["config.json", "tokenizer.json", "weights.safetensors"]);
    expect((await store.head("policies/v1/weights.safetensors"))?.size).toBe(manifest.files[2]!.size);

    const loaded = await loadCheckpoint(store, 1);
    expect(loaded.manifest).toEqual(manifest);
    expect(loaded.config).toEqual(policy.config);
    expect(loaded.tokenizerJson).toBe(TOKENIZER);
    expect(loaded.policy.version).toBe(1);
    const seqs = [tokens(20, 1), tokens(7, 2)];
    expect(loaded.policy.logProbs(seqs, 0.9)).toEqual(policy.logProbs(seqs, 0.9));
    // A trainable load trains.
    const trainable = await loadCheckpoint(store, "newest", { trainable: true });
    expect(trainable.policy.trainable).toBe(true);
    expect(trainable.policy.step).toBe(10);
    for (const p of [policy, loaded.policy, trainable.policy]) p.dispose();
  });

  it("round-trips a tied-embedding model, which stores no lm_head", async () => {
    const store = new MemoryStore();
    const policy = createPolicy({ ...SMALL, tieEmbeddings: true }, 6);
    await saveCheckpoint(store, policy, { version: 1, step: 0, parent: 0, tokenizerJson: TOKENIZER });
    const loaded = await loadCheckpoint(store, 1);
    expect(loaded.config.tieEmbeddings).toBe(true);
    expect([...loaded.policy.params.keys()]).not.toContain("lm_head");
    const seqs = [tokens(12, 3)];
    expect(loaded.policy.logProbs(seqs, 1)).toEqual(policy.logProbs(seqs, 1));
    for (const p of [policy, loaded.policy]) p.dispose();
  });

  it("resumes Adam exactly when the optimizer state is saved, and restarts it cleanly when not", async () => {
    const store = new MemoryStore();
    const lr = 1e-3;
    const policy = createPolicy(SMALL, 6, { optimizer: { learningRate: lr } });
    const seqs = [tokens(16, 1), tokens(9, 2)];
    const loss = (logp: tf.Tensor2D) => tf.div(tf.neg(tf.sum(logp)), 23) as tf.Scalar;
    policy.trainStep(seqs, 1, loss);
    policy.trainStep(seqs, 1, loss);
    const withState = await saveCheckpoint(store, policy, {
      version: 1,
      step: 2,
      parent: 0,
      tokenizerJson: TOKENIZER,
      optimizerState: true,
    });
    expect(withState.files.map((f) => f.name)).toContain(OPTIMIZER_FILE);
    await saveCheckpoint(store, policy, { version: 2, step: 2, parent: 0, tokenizerJson: TOKENIZER });
    const resumed = (await loadCheckpoint(store, 1, { trainable: true, optimizer: { learningRate: lr } })).policy;
    policy.trainStep(seqs, 1, loss);
    resumed.trainStep(seqs, 1, loss);
    const expected = policy.values();
    for (const [name, w] of resumed.values()) expect(w, name).toEqual(expected.get(name));
    // Without saved moments the first update is a fresh Adam step: at most the learning rate per weight.
    const fresh = (await loadCheckpoint(store, 2, { trainable: true, optimizer: { learningRate: lr } })).policy;
    const before = fresh.values();
    fresh.trainStep(seqs, 1, loss);
    let maxDelta = 0;
    for (const [name, w] of fresh.values()) {
      const old = before.get(name)!;
      for (let i = 0; i < w.length; i++) maxDelta = Math.max(maxDelta, Math.abs(w[i]! - old[i]!));
    }
    expect(maxDelta).toBeGreaterThan(lr / 2);
    expect(maxDelta).toBeLessThanOrEqual(lr * 1.001);
    for (const p of [policy, resumed, fresh]) p.dispose();
  });

  it("never overwrites a published version", async () => {
    const store = new MemoryStore();
    const a = createPolicy(SMALL, 1);
    const b = createPolicy(SMALL, 2);
    await saveCheckpoint(store, a, { version: 3, step: 1, parent: null, tokenizerJson: TOKENIZER });
    const before = await store.get("policies/v3/weights.safetensors");
    await expect(
      saveCheckpoint(store, b, { version: 3, step: 2, parent: null, tokenizerJson: TOKENIZER }),
    ).rejects.toThrow(/version 3 already exists/);
    const after = await store.get("policies/v3/weights.safetensors");
    expect(Buffer.from(after!).equals(Buffer.from(before!))).toBe(true);
    expect((await readManifest(store, 3)).step).toBe(1);
    a.dispose();
    b.dispose();
  });

  it("keeps an incomplete save invisible and skips torn or invalid versions with a reason", async () => {
    const store = new MemoryStore();
    const policy = createPolicy(SMALL, 1);
    await saveCheckpoint(store, policy, { version: 1, step: 1, parent: 0, tokenizerJson: TOKENIZER });
    await saveCheckpoint(store, policy, { version: 2, step: 2, parent: 1, tokenizerJson: TOKENIZER });
    // A crash while writing v3's weights leaves files but no manifest: not a version.
    store.failOn = /v3\/weights/;
    await expect(
      saveCheckpoint(store, policy, { version: 3, step: 3, parent: 2, tokenizerJson: TOKENIZER }),
    ).rejects.toThrow(/simulated crash/);
    store.failOn = undefined;
    expect(await store.head("policies/v3/config.json")).toBeDefined();
    expect(await listVersions(store)).toEqual([2, 1]);
    expect(await newestVersion(store)).toBe(2);

    // v4: invalid manifest; v2: torn (weights deleted after publishing).
    await store.put("policies/v4/manifest.json", JSON.stringify({ schemaVersion: 1, version: 4 }));
    await store.delete("policies/v2/weights.safetensors");
    expect(await newestVersion(store)).toBe(2);
    const loaded = await loadCheckpoint(store, "newest");
    expect(loaded.manifest.version).toBe(1);
    expect(loaded.skipped.map((s) => s.version)).toEqual([4, 2]);
    expect(loaded.skipped[0]!.reason).toMatch(/version 4: invalid manifest: step/);
    expect(loaded.skipped[1]!.reason).toMatch(/version 2: weights.safetensors is missing \(torn version\)/);
    await expect(loadCheckpoint(store, 2)).rejects.toThrow(CheckpointError);
    await expect(loadCheckpoint(store, 9)).rejects.toThrow(/version 9: no manifest/);

    // Corrupted bytes fail the checksum.
    const weights = (await store.get("policies/v1/weights.safetensors"))!;
    const corrupt = Uint8Array.from(weights);
    corrupt[corrupt.length - 1]! ^= 0xff;
    await store.put("policies/v1/weights.safetensors", corrupt);
    await expect(loadCheckpoint(store, "newest")).rejects.toThrow(/does not match its manifest size\/sha256/);
    loaded.policy.dispose();
    policy.dispose();
  });

  it("reports an empty store", async () => {
    const store = new MemoryStore();
    expect(await newestVersion(store)).toBeUndefined();
    await expect(loadCheckpoint(store, "newest")).rejects.toThrow(/the store has none/);
    await expect(loadCheckpoint(store, -1)).rejects.toThrow(/not "newest" or an integer/);
  });
});
