import { z } from "zod";

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

export const PolicyConfig = z
  .object({
    model: ModelConfig.prefault({}),
    /** TF.js backend; `auto` picks tfjs-node-gpu, tfjs-node, wasm, cpu in that order. */
    backend: z.enum(["auto", "tensorflow", "wasm", "cpu"]).default("auto").describe("TF.js backend"),
    /** Seconds between polls of the checkpoint store's newest manifest. */
    pollSeconds: z.number().positive().default(1).describe("checkpoint poll interval (s)"),
    /** Most sequences decoded together in one step (continuous batching). */
    maxBatch: z.number().int().min(1).max(512).default(64).describe("continuous batching width"),
    /**
     * Checkpoint folder (relative to the working directory) a run imports as v0 when its store
     * holds no policy yet; `agentrl train --base` overrides it. Unset: the committed five-task
     * warm-up, trainer-image/base-policy.
     */
    base: z
      .string()
      .min(1)
      .optional()
      .describe("base checkpoint folder imported as v0 (default: trainer-image/base-policy)"),
    /**
     * What a pinned policy server serves (`agentrl policy serve --pin`, the closing evaluation's
     * servers): `newest`, a version number, or a path to a local checkpoint folder. The trainer
     * always continues the newest version of its own store (its ledger is there); a run starts
     * from `policy.base`.
     */
    init: z
      .union([z.string().min(1), z.number().int().nonnegative().transform(String)])
      .default("newest")
      .describe("version a pinned policy server serves: newest, a version number or a checkpoint folder"),
  })
  .strict();
export type PolicyConfig = z.infer<typeof PolicyConfig>;
