import { z } from "zod";
import { ModelConfig } from "../../config/policy.ts";
import { AgentRlError, issuesOf } from "../../errors.ts";
import type { FloatDtype } from "../safetensors.ts";

/** Raised for a Hugging Face folder this project cannot import or a checkpoint it cannot export. */
export class HfFormatError extends AgentRlError {
  override readonly name = "HfFormatError";
}

/** Causal-LM classes whose block is the one TransformerPolicy implements. */
export const HF_ARCHITECTURES = ["Qwen2ForCausalLM", "LlamaForCausalLM"] as const;
export type HfArchitecture = (typeof HF_ARCHITECTURES)[number];

const MODEL_TYPE: Record<HfArchitecture, string> = { Qwen2ForCausalLM: "qwen2", LlamaForCausalLM: "llama" };

const positiveInt = z.number().int().positive();

/**
 * The fields of a transformers config.json this project reads. Other fields are kept (passthrough)
 * so an export writes them back unchanged.
 */
export const HfConfigJson = z
  .object({
    architectures: z.array(z.string()).min(1),
    model_type: z.string().optional(),
    vocab_size: positiveInt,
    hidden_size: positiveInt,
    intermediate_size: positiveInt,
    num_hidden_layers: positiveInt,
    num_attention_heads: positiveInt,
    num_key_value_heads: positiveInt.optional(),
    head_dim: positiveInt.nullable().optional(),
    max_position_embeddings: positiveInt,
    rope_theta: z.number().positive().default(10_000),
    rms_norm_eps: z.number().positive().default(1e-6),
    tie_word_embeddings: z.boolean().default(false),
    hidden_act: z.string().default("silu"),
    rope_scaling: z.unknown().optional(),
    use_sliding_window: z.boolean().optional(),
    sliding_window: z.number().int().nullable().optional(),
    attention_bias: z.boolean().optional(),
    mlp_bias: z.boolean().optional(),
    torch_dtype: z.string().nullable().optional(),
    dtype: z.string().nullable().optional(),
  })
  .passthrough();
export type HfConfigJson = z.infer<typeof HfConfigJson>;

/** Fields whose presence means a mixture-of-experts block, which TransformerPolicy does not have. */
const MOE_FIELDS = ["num_experts", "num_local_experts", "moe_intermediate_size", "n_routed_experts"] as const;

const TORCH_DTYPES: Record<string, FloatDtype> = { float32: "F32", bfloat16: "BF16", float16: "F16" };

/** What an HF config.json means for this project. */
export interface ImportedHfConfig {
  readonly model: ModelConfig;
  readonly architecture: HfArchitecture;
  /** Element type named by torch_dtype/dtype (F32 when absent). */
  readonly dtype: FloatDtype;
  readonly raw: HfConfigJson;
}

/**
 * Maps a transformers config.json to a ModelConfig, refusing anything the block does not compute
 * (rope scaling, sliding windows, MoE, biases besides Qwen2's q/k/v, other activations) with an
 * error naming the config field.
 */
export function modelConfigFromHf(json: unknown): ImportedHfConfig {
  const parsed = HfConfigJson.safeParse(json);
  if (!parsed.success)
    throw new HfFormatError(
      `config.json: ${issuesOf(parsed.error)
        .map((i) => `${i.path}: ${i.message}`)
        .join("; ")}`,
    );
  const raw = parsed.data;
  const unsupported = (field: string, why: string): never => {
    throw new HfFormatError(`config.json ${field}: ${why}`);
  };
  const architecture = raw.architectures[0]!;
  if (!(HF_ARCHITECTURES as readonly string[]).includes(architecture))
    unsupported(
      "architectures",
      `${architecture} is not supported (supported: ${HF_ARCHITECTURES.join(", ")}; Qwen3 needs q/k norms, which this transformer does not have)`,
    );
  const arch = architecture as HfArchitecture;
  for (const field of MOE_FIELDS)
    if (raw[field] !== undefined && raw[field] !== null && raw[field] !== 0)
      unsupported(field, "mixture-of-experts blocks are not supported");
  if (raw.rope_scaling !== undefined && raw.rope_scaling !== null)
    unsupported("rope_scaling", `${JSON.stringify(raw.rope_scaling)} is not supported (only plain rotary, null)`);
  if (raw.use_sliding_window === true) unsupported("use_sliding_window", "sliding-window attention is not supported");
  if (arch === "LlamaForCausalLM" && raw.sliding_window !== undefined && raw.sliding_window !== null)
    unsupported("sliding_window", "sliding-window attention is not supported");
  if (raw.hidden_act !== "silu") unsupported("hidden_act", `${raw.hidden_act} is not supported (only silu: SwiGLU)`);
  if (raw.attention_bias === true)
    unsupported("attention_bias", "Llama attention biases (including o_proj's) are not supported");
  if (raw.mlp_bias === true) unsupported("mlp_bias", "MLP biases are not supported");
  const headDim = raw.hidden_size / raw.num_attention_heads;
  if (raw.head_dim !== undefined && raw.head_dim !== null && raw.head_dim !== headDim)
    unsupported("head_dim", `${raw.head_dim} differs from hidden_size / num_attention_heads = ${headDim}`);
  const dtypeName = raw.torch_dtype ?? raw.dtype ?? "float32";
  const dtype = TORCH_DTYPES[dtypeName];
  if (!dtype)
    unsupported(
      raw.torch_dtype ? "torch_dtype" : "dtype",
      `${dtypeName} is not supported (${Object.keys(TORCH_DTYPES).join(", ")})`,
    );
  const candidate = {
    vocabSize: raw.vocab_size,
    dModel: raw.hidden_size,
    layers: raw.num_hidden_layers,
    heads: raw.num_attention_heads,
    kvHeads: raw.num_key_value_heads ?? raw.num_attention_heads,
    ffnHidden: raw.intermediate_size,
    contextLength: raw.max_position_embeddings,
    ropeTheta: raw.rope_theta,
    normEps: raw.rms_norm_eps,
    tieEmbeddings: raw.tie_word_embeddings,
    qkvBias: arch === "Qwen2ForCausalLM",
  };
  const model = ModelConfig.safeParse(candidate);
  if (!model.success) {
    const hfName: Record<string, string> = {
      vocabSize: "vocab_size",
      dModel: "hidden_size",
      layers: "num_hidden_layers",
      heads: "num_attention_heads",
      kvHeads: "num_key_value_heads",
      ffnHidden: "intermediate_size",
      contextLength: "max_position_embeddings",
    };
    throw new HfFormatError(
      `config.json: ${issuesOf(model.error)
        .map((i) => `${hfName[i.path] ?? i.path}: ${i.message}`)
        .join("; ")}`,
    );
  }
  return { model: model.data, architecture: arch, dtype: dtype as FloatDtype, raw };
}

/**
 * The config.json for `model`: the imported file's other fields kept as they were, the shape
 * fields written from `model` (they are what the weights have).
 */
export function hfConfigFor(
  model: ModelConfig,
  architecture: HfArchitecture,
  dtype: FloatDtype,
  base: Record<string, unknown> = {},
): Record<string, unknown> {
  const torchDtype = Object.entries(TORCH_DTYPES).find(([, d]) => d === dtype)![0];
  return {
    ...base,
    architectures: [architecture],
    model_type: MODEL_TYPE[architecture],
    vocab_size: model.vocabSize,
    hidden_size: model.dModel,
    intermediate_size: model.ffnHidden,
    num_hidden_layers: model.layers,
    num_attention_heads: model.heads,
    num_key_value_heads: model.kvHeads,
    max_position_embeddings: model.contextLength,
    rope_theta: model.ropeTheta,
    rms_norm_eps: model.normEps,
    tie_word_embeddings: model.tieEmbeddings,
    hidden_act: "silu",
    ...(architecture === "LlamaForCausalLM" ? { attention_bias: false, mlp_bias: false } : {}),
    rope_scaling: null,
    torch_dtype: torchDtype,
  };
}

/** The architecture a project checkpoint exports as: Qwen2 when it has q/k/v biases, else Llama. */
export function architectureFor(model: ModelConfig): HfArchitecture {
  return model.qkvBias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
}
