import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import { CHAT_TEMPLATE } from "../../shared/chat/index.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import {
  exportHfFolder,
  HfFormatError,
  importHfFolder,
  modelTokenizerConfig,
  readHfFolder,
} from "../../shared/model/hf/index.ts";
import { initBackend } from "../../shared/model/index.ts";
import { decodeSafetensors } from "../../shared/model/safetensors.ts";
import { runProcess } from "../support/cli.ts";
import { TINY_HF, type TinyHfOptions, writeTinyHfFolder } from "../support/hf-tiny.ts";
import { numpyMissing, requireOrSkip } from "../support/requirements.ts";
import { tempDir } from "../support/tmp.ts";
import { MemoryStore } from "./support.ts";

const hasNumpy = requireOrSkip("hf.test.ts", "numerics against the numpy reference forward", numpyMissing());
const REFERENCE = fileURLToPath(new URL("../fixtures/hf_reference.py", import.meta.url));

beforeAll(async () => {
  await initBackend("wasm");
});

/** Per-token log-probs of `sequences` from the numpy reference forward over the folder. */
async function referenceLogProbs(dir: string, sequences: number[][], temperature: number): Promise<number[][]> {
  const run = await runProcess("python3", [REFERENCE, dir, String(temperature), JSON.stringify(sequences)]);
  expect(run.stderr).toBe("");
  expect(run.status).toBe(0);
  return JSON.parse(run.stdout) as number[][];
}

function folder(options: TinyHfOptions): string {
  const dir = tempDir("agentrl-hf-");
  writeTinyHfFolder(dir, options);
  return dir;
}

const SEQUENCES = [
  Array.from({ length: 23 }, (_, i) => (i * 37 + 5) % TINY_HF.vocab),
  Array.from({ length: 9 }, (_, i) => (i * 101 + 17) % TINY_HF.vocab),
];

describe.skipIf(!hasNumpy)("Hugging Face import: numerics against an independent numpy forward", () => {
  it.each([
    ["Qwen2, untied head", { architecture: "Qwen2ForCausalLM", tied: false }],
    ["Qwen2, tied embeddings", { architecture: "Qwen2ForCausalLM", tied: true }],
    ["Llama, untied head", { architecture: "LlamaForCausalLM", tied: false }],
  ] as const)("%s: per-token log-probs match within 1e-4 in float32", async (_, options) => {
    const dir = folder({ ...options, seed: 3 });
    const store = new MemoryStore();
    await importHfFolder(dir, store);
    const { policy, config, manifest } = await loadCheckpoint(store, 0);
    // The folder's chat template travels with the checkpoint (a server renders with it).
    expect((await modelTokenizerConfig(store, manifest))?.chat_template).toBe(CHAT_TEMPLATE);
    expect(config.qkvBias).toBe(options.architecture === "Qwen2ForCausalLM");
    expect(config.tieEmbeddings).toBe(options.tied);
    expect(config.ropeTheta).toBe(TINY_HF.ropeTheta);
    expect(config.normEps).toBe(TINY_HF.eps);
    for (const temperature of [1, 0.7]) {
      const ours = policy.logProbs(
        SEQUENCES.map((s) => Int32Array.from(s)),
        temperature,
      );
      const reference = await referenceLogProbs(dir, SEQUENCES, temperature);
      let worst = 0;
      SEQUENCES.forEach((seq, i) => {
        for (let t = 1; t < seq.length; t++) worst = Math.max(worst, Math.abs(ours[i]![t]! - reference[i]![t]!));
      });
      expect(worst).toBeLessThan(1e-4);
      // Random weights give far-from-uniform predictions, so the comparison is not vacuous.
      expect(Math.min(...reference.flat().slice(1))).toBeLessThan(Math.log(1 / TINY_HF.vocab) - 1);
    }
    policy.dispose();
  });
});

describe("Hugging Face import and export", () => {
  it.each([
    ["BF16 in two shards, untied", { dtype: "BF16", shards: 2, tied: false }],
    ["F16, tied", { dtype: "F16", tied: true }],
    ["F32 Llama", { dtype: "F32", architecture: "LlamaForCausalLM" }],
  ] as const)("%s: import then export reproduces every tensor exactly", async (_, options) => {
    const source = folder({ ...options, seed: 5 });
    const store = new MemoryStore();
    await importHfFolder(source, store);
    const out = tempDir("agentrl-hf-out-");
    const written = await exportHfFolder(store, 0, out);
    expect(written.dtype).toBe(options.dtype);
    const original = await readTensors(source);
    const exported = decodeSafetensors(readFileSync(join(out, "model.safetensors")), {
      dtypes: ["F32", "F16", "BF16"],
    });
    expect([...exported.tensors.keys()].sort()).toEqual([...original.keys()].sort());
    for (const [name, tensor] of original) {
      const back = exported.tensors.get(name)!;
      expect(back.shape, name).toEqual(tensor.shape);
      expect(exported.dtypes.get(name), name).toBe(options.dtype);
      expect(Buffer.from(back.data.buffer).equals(Buffer.from(tensor.data.buffer)), name).toBe(true);
    }
    expect(exported.metadata.format).toBe("pt");
    const config = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
    expect(config).toEqual(JSON.parse(readFileSync(join(source, "config.json"), "utf8")));
    for (const file of ["tokenizer.json", "tokenizer_config.json", "generation_config.json"])
      expect(JSON.parse(readFileSync(join(out, file), "utf8")), file).toEqual(
        JSON.parse(readFileSync(join(source, file), "utf8")),
      );
    // The exported folder imports again to the same model.
    const again = await readHfFolder(out);
    const first = await readHfFolder(source);
    expect(again.config).toEqual(first.config);
  });

  it("refuses what the block does not compute, naming the config field", async () => {
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ rope_scaling: { type: "yarn", factor: 4 } }, /config\.json rope_scaling: .*yarn.* not supported/],
      [{ use_sliding_window: true }, /config\.json use_sliding_window: sliding-window/],
      [{ architectures: ["Qwen3ForCausalLM"] }, /config\.json architectures: Qwen3ForCausalLM is not supported/],
      [{ num_experts: 8 }, /config\.json num_experts: mixture-of-experts/],
      [{ hidden_act: "gelu" }, /config\.json hidden_act: gelu is not supported/],
      [{ head_dim: 16 }, /config\.json head_dim: 16 differs/],
      [{ num_key_value_heads: 3 }, /config\.json: num_key_value_heads: must divide heads/],
      [{ torch_dtype: "int8" }, /config\.json torch_dtype: int8 is not supported/],
    ];
    for (const [overrides, message] of cases) {
      const dir = folder({ configOverrides: overrides });
      await expect(readHfFolder(dir)).rejects.toThrow(message);
    }
    const missing = folder({});
    writeFileSync(join(missing, "model.safetensors"), new Uint8Array(4));
    await expect(readHfFolder(missing)).rejects.toThrow(HfFormatError);
    await expect(readHfFolder(missing)).rejects.toThrow(/model\.safetensors: file is 4 bytes/);
    const extra = folder({
      architecture: "LlamaForCausalLM",
      configOverrides: { architectures: ["Qwen2ForCausalLM"] },
    });
    await expect(readHfFolder(extra)).rejects.toThrow(/weights: model\.layers\.0\.self_attn\.q_proj\.bias is missing/);
  });
});

async function readTensors(dir: string) {
  const index = join(dir, "model.safetensors.index.json");
  const files = (() => {
    try {
      return [...new Set(Object.values(JSON.parse(readFileSync(index, "utf8")).weight_map as Record<string, string>))];
    } catch {
      return ["model.safetensors"];
    }
  })();
  const tensors = new Map<string, { shape: readonly number[]; data: Float32Array }>();
  for (const file of files)
    for (const [name, t] of decodeSafetensors(readFileSync(join(dir, file)), { dtypes: ["F32", "F16", "BF16"] })
      .tensors)
      tensors.set(name, t);
  return tensors;
}
