import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { gpuCheck } from "../../scripts/gpu-check.ts";
import { loadConfig } from "../../shared/config/index.ts";
import { ModelConfig } from "../../shared/config/policy.ts";
import { modelConfigFromHf } from "../../shared/model/hf/index.ts";
import { estimateTrainingMemory, parameterCount } from "../../shared/model/memory.ts";
import { parameterShapes } from "../../shared/model/transformer.ts";
import { agentrl, runProcess } from "../support/cli.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { tempDir } from "../support/tmp.ts";

const GPU_CONFIG = fileURLToPath(new URL("../../configs/qwen2.5-0.5b-gpu.yaml", import.meta.url));
const GPU_CHECK = fileURLToPath(new URL("../../scripts/gpu-check", import.meta.url));

/** Qwen2.5-0.5B-Instruct's config.json fields that set its shape. */
const QWEN25_05B = {
  architectures: ["Qwen2ForCausalLM"],
  vocab_size: 151936,
  hidden_size: 896,
  intermediate_size: 4864,
  num_hidden_layers: 24,
  num_attention_heads: 14,
  num_key_value_heads: 2,
  max_position_embeddings: 32768,
  rope_theta: 1000000,
  rms_norm_eps: 1e-6,
  tie_word_embeddings: true,
  hidden_act: "silu",
  use_sliding_window: false,
  torch_dtype: "bfloat16",
};

const count = (model: ModelConfig) =>
  parameterShapes(model).reduce((n, p) => n + p.shape.reduce((a, b) => a * b, 1), 0);

describe("training memory estimate", () => {
  it("matches numbers computed by hand for a small shape", () => {
    // hd 8, q|k|v width (4 + 2·2)·8 = 64; per layer 32 + 32·64 + 64 + 32·32 + 32 + 3·32·48 = 7808
    const model = ModelConfig.parse({
      vocabSize: 300,
      dModel: 32,
      layers: 2,
      heads: 4,
      kvHeads: 2,
      ffnHidden: 48,
      contextLength: 128,
      qkvBias: true,
    });
    const estimate = estimateTrainingMemory(model, { microBatchTokens: 64, sequenceTokens: 100 });
    expect(estimate.parameters).toBe(300 * 32 + 2 * 7808 + 32 + 32 * 300); // 34,848
    expect(estimate.parameters).toBe(count(model));
    // A sequence of 100 does not fit a 64-token micro-batch: the micro-batch is that one sequence.
    expect(estimate.microBatchTokens).toBe(100);
    expect(estimate.sequenceLength).toBe(100);
    // per token and layer: 4·32 + 64 + 6·8 + 32 + 4·48 + 2·4·100 = 1264 floats
    expect(estimate.bytes).toEqual({
      weights: 34848 * 4,
      gradients: 2 * 34848 * 4,
      adamMoments: 2 * 34848 * 4,
      activations: 100 * 2 * 1264 * 4,
      logits: 3 * 100 * 300 * 4,
      total: 34848 * 4 * 5 + 100 * 2 * 1264 * 4 + 3 * 100 * 300 * 4, // 2,068,160
    });
    // The context window caps the attention length; the micro-batch then packs more tokens.
    const capped = estimateTrainingMemory(model, { microBatchTokens: 512, sequenceTokens: 4096 });
    expect([capped.sequenceLength, capped.microBatchTokens]).toEqual([128, 512]);
  });

  it("counts Qwen2.5-0.5B as 494,032,768 parameters, and the shipped GPU config is that model on tensorflow", async () => {
    const qwen = modelConfigFromHf(QWEN25_05B).model;
    // embed 151936·896 + 24 · (896·1152 + 1152 + 896·896 + 3·896·4864 + 2·896) + 896, tied head
    expect(parameterCount(qwen)).toBe(
      151936 * 896 + 24 * (896 * 1152 + 1152 + 896 * 896 + 3 * 896 * 4864 + 2 * 896) + 896,
    );
    expect(parameterCount(qwen)).toBe(494_032_768);
    expect(parameterCount(qwen)).toBe(count(qwen));
    const config = await loadConfig(GPU_CONFIG);
    expect(config.policy.backend).toBe("tensorflow");
    expect(config.policy.exportHf).toBe(true);
    expect({ ...config.policy.model, contextLength: qwen.contextLength }).toEqual(qwen);
    const json = await agentrl(["policy", "estimate-memory", "-c", GPU_CONFIG, "--json"]);
    expect(json.status).toBe(0);
    const printed = JSON.parse(json.stdout) as ReturnType<typeof estimateTrainingMemory>;
    expect(printed).toMatchObject(
      estimateTrainingMemory(qwen, {
        microBatchTokens: config.trainer.microBatchTokens,
        sequenceTokens: config.rollout.maxTotalTokens,
      }),
    );
  }, 120_000);
});

describe("scripts/gpu-check", () => {
  it("says what is missing and exits non-zero without a GPU or tfjs-node-gpu", async () => {
    const missing = await runProcess(GPU_CHECK, []);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/cannot train on a GPU:\n {2}- no NVIDIA GPU: `nvidia-smi -L`/);
    expect(missing.stderr).toMatch(/@tensorflow\/tfjs-node-gpu is not installed/);
  }, 120_000);

  it("runs its train steps and decode in a CPU dry run", async () => {
    const tiny = join(tempDir("agentrl-gpu-check-"), "tiny");
    writeTinyHfFolder(tiny);
    let out = "";
    let err = "";
    const code = await gpuCheck([tiny, "--cpu-dry-run", "--steps", "1", "--tokens", "32", "--batch", "2"], {
      out: (text) => {
        out += text;
      },
      err: (text) => {
        err += text;
      },
    });
    expect(code, err).toBe(0);
    expect(out).toMatch(/train step 1: [\d.]+ s, \d+ tokens\/s, loss [\d.]+/);
    expect(out).toMatch(/decode 2 × 64 tokens: \d+ tokens\/s/);
    const refused: string[] = [];
    expect(await gpuCheck(["--steps", "0"], { out: () => {}, err: (text) => refused.push(text) })).toBe(1);
    expect(refused.join("")).toMatch(/--steps must be an integer >= 1, got "0"/);
  }, 120_000);
});
