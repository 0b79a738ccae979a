import { z } from "zod";
import { ENGINE_ID_PATTERN, engineIdOf } from "../policy/engine-sync.ts";

/** Sizes of the decoder-only transformer (Llama/Qwen2 block). */
export const ModelConfig = z
  .object({
    vocabSize: z.number().int().min(260).max(262_144).default(1024).describe("tokenizer vocabulary size"),
    dModel: z.number().int().min(8).default(128).describe("hidden size"),
    layers: z.number().int().min(1).default(4).describe("transformer blocks"),
    heads: z.number().int().min(1).default(4).describe("attention heads"),
    kvHeads: z.number().int().min(1).default(2).describe("key/value heads (grouped-query attention)"),
    ffnHidden: z.number().int().min(8).default(384).describe("SwiGLU hidden size"),
    contextLength: z.number().int().min(64).default(2048).describe("maximum sequence length"),
    ropeTheta: z.number().positive().default(10_000).describe("rotary base"),
    normEps: z.number().positive().default(1e-5).describe("RMSNorm epsilon"),
    tieEmbeddings: z.boolean().default(false).describe("logits from the input embedding table (no lm_head)"),
    qkvBias: z.boolean().default(false).describe("learned biases on the q/k/v projections (Qwen2)"),
  })
  .strict()
  .superRefine((m, ctx) => {
    if (m.dModel % m.heads !== 0)
      ctx.addIssue({ code: "custom", path: ["dModel"], message: `must be divisible by heads (${m.heads})` });
    if (m.heads % m.kvHeads !== 0)
      ctx.addIssue({ code: "custom", path: ["kvHeads"], message: `must divide heads (${m.heads})` });
    if ((m.dModel / m.heads) % 2 !== 0)
      ctx.addIssue({ code: "custom", path: ["heads"], message: "head size dModel/heads must be even for rotary" });
  });
export type ModelConfig = z.infer<typeof ModelConfig>;

/** An inference engine the trainer tells to load each exported version (`policy.syncEngines`). */
export const SyncEngineConfig = z
  .object({
    /**
     * Names the engine's sync record, engines/<id>.json in the checkpoint store, which a rollout
     * pool with `rollout.versionSource: sync` reads (`rollout.syncEngine`). Unset: derived from the
     * URL's host and port (`http://vllm:8000` → `vllm-8000`).
     */
    id: z
      .string()
      .regex(ENGINE_ID_PATTERN, "lowercase letters, digits and '-', at most 63 characters")
      .optional()
      .describe("engine id: its sync record engines/<id>.json (default: host-port of url)"),
    /** The engine's root URL (SGLang's /update_weights_from_disk, vLLM's dev-mode /collective_rpc live there). */
    url: z.url({ protocol: /^https?$/, error: "must be an http(s) URL" }).describe("engine root URL"),
    /**
     * `sglang`: POST /update_weights_from_disk (SGLang, and this project's policy server); `vllm`:
     * POST /collective_rpc update_config + reload_weights (vLLM started with VLLM_SERVER_DEV_MODE=1).
     */
    dialect: z.enum(["sglang", "vllm"]).default("sglang").describe("how the engine loads weights from disk"),
    /** Environment variable holding the engine's API key, sent as `Authorization: Bearer`. */
    apiKeyEnv: z
      .string()
      .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name")
      .optional()
      .describe("env var with the engine's bearer key"),
    /**
     * Where the engine sees the checkpoint store's root (a shared volume); the engine loads
     * `<checkpointMount>/policies/vN/hf`. Unset: the local store's folder on this machine.
     */
    checkpointMount: z.string().min(1).optional().describe("sglang: checkpoint store root as the engine sees it"),
    /**
     * vllm: the folder the engine was started on (`vllm serve <modelDir>`), writable by the trainer:
     * each version's files replace the folder's before the reload (vLLM reloads from where it started).
     */
    modelDir: z.string().min(1).optional().describe("vllm: the folder the engine serves (replaced per version)"),
  })
  .strict()
  .superRefine((e, ctx) => {
    if (e.dialect === "vllm" && e.modelDir === undefined)
      ctx.addIssue({
        code: "custom",
        path: ["modelDir"],
        message: "a vllm engine reloads from the folder it was started on; name it (vllm serve <modelDir>)",
      });
  });
export type SyncEngineConfig = z.infer<typeof SyncEngineConfig>;

export const PolicyConfig = z
  .object({
    model: ModelConfig.prefault({}),
    /**
     * TF.js backend; `auto` picks tfjs-node-gpu, tfjs-node, wasm, cpu in that order. `webgpu`
     * (Dawn on a Vulkan driver: a GPU's, or lavapipe on a CPU) is used only when named.
     */
    backend: z.enum(["auto", "tensorflow", "wasm", "cpu", "webgpu"]).default("auto").describe("TF.js backend"),
    /** Seconds between polls of the checkpoint store's newest manifest. */
    pollSeconds: z.number().positive().default(1).describe("checkpoint poll interval (s)"),
    /** Most sequences decoded together in one step (continuous batching). */
    maxBatch: z.number().int().min(1).max(512).default(64).describe("continuous batching width"),
    /**
     * Checkpoint folder (relative to the working directory) a run imports as v0 when its store
     * holds no policy yet, or a Hugging Face model folder (imported on the fly, chat template
     * included); `agentrl train --base` overrides it. Unset: the committed five-task warm-up,
     * trainer-image/base-policy.
     */
    base: z
      .string()
      .min(1)
      .optional()
      .describe("checkpoint or Hugging Face folder imported as v0 (default: trainer-image/base-policy)"),
    /**
     * What a pinned policy server serves (`agentrl policy serve --pin`, the closing evaluation's
     * servers): `newest`, a version number, or a path to a local checkpoint folder. The trainer
     * always continues the newest version of its own store (its ledger is there); a run starts
     * from `policy.base`.
     */
    init: z
      .union([z.string().min(1), z.number().int().nonnegative().transform(String)])
      .default("newest")
      .describe("version a pinned policy server serves: newest, a version number, a checkpoint or Hugging Face folder"),
    /** At every publish, also write the version as a Hugging Face folder under policies/vN/hf/ (what engines load). */
    exportHf: z.boolean().default(false).describe("write policies/vN/hf/ (a Hugging Face folder) at every publish"),
    /** Engines told to load each exported version; one that does not confirm keeps serving (and reporting) its old version. */
    syncEngines: z
      .array(SyncEngineConfig)
      .default([])
      .describe("inference engines that load each published version from policies/vN/hf/ (needs exportHf)"),
  })
  .strict()
  .superRefine((p, ctx) => {
    if (p.syncEngines.length > 0 && !p.exportHf)
      ctx.addIssue({
        code: "custom",
        path: ["syncEngines"],
        message: "engines load policies/vN/hf/, which only policy.exportHf: true writes; set it",
      });
    // Two engines on one record would let one's reload be read as the other's.
    const seen = new Map<string, number>();
    p.syncEngines.forEach((engine, i) => {
      const id = engineIdOf(engine);
      const first = seen.get(id);
      if (first !== undefined)
        ctx.addIssue({
          code: "custom",
          path: ["syncEngines", i, "id"],
          message: `"${id}" is also the id of policy.syncEngines[${first}]; each engine needs its own sync record`,
        });
      else seen.set(id, i);
    });
  });
export type PolicyConfig = z.infer<typeof PolicyConfig>;
