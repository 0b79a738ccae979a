import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CHAT_TEMPLATE, trainTokenizer } from "../../shared/chat/index.ts";
import { encodeSafetensors, type FloatDtype, type NamedTensor } from "../../shared/model/safetensors.ts";

/** What a tiny random transformers folder is made of. */
export interface TinyHfOptions {
  readonly architecture?: "Qwen2ForCausalLM" | "LlamaForCausalLM";
  readonly tied?: boolean;
  readonly dtype?: FloatDtype;
  /** Split the weights over this many shards with model.safetensors.index.json. @default 1 */
  readonly shards?: number;
  readonly seed?: number;
  /** Extra config.json fields (to test refusals). */
  readonly configOverrides?: Record<string, unknown>;
  /** A real model's tokenizer.json and tokenizer_config.json texts instead of a tiny trained one (set `vocab` to fit). */
  readonly tokenizerFiles?: { readonly tokenizerJson: string; readonly tokenizerConfig: string };
  /** Embedding rows (vocab_size). @default TINY_HF.vocab */
  readonly vocab?: number;
  /** max_position_embeddings. @default TINY_HF.context */
  readonly context?: number;
}

/** Sizes of the tiny folder: GQA (4 query heads over 2 kv heads), hidden 32, 2 layers. */
export const TINY_HF = {
  vocab: 320,
  hidden: 32,
  intermediate: 48,
  layers: 2,
  heads: 4,
  kvHeads: 2,
  context: 128,
  ropeTheta: 1_000_000,
  eps: 1e-6,
} as const;

/** mulberry32 + Box–Muller: reproducible normals without a dependency. */
function normals(seed: number): () => number {
  let a = seed >>> 0;
  const uniform = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return () => Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());
}

/**
 * Writes a transformers-layout Qwen2/Llama folder with random weights, written directly under the
 * transformers tensor names and [out, in] layout (independently of shared/model/hf), a byte-level
 * BPE tokenizer.json, tokenizer_config.json with the chat template, and generation_config.json.
 * Returns the float32 tensors before they were rounded to `dtype`.
 */
export function writeTinyHfFolder(dir: string, options: TinyHfOptions = {}): Map<string, NamedTensor> {
  const architecture = options.architecture ?? "Qwen2ForCausalLM";
  const tied = options.tied ?? false;
  const dtype = options.dtype ?? "F32";
  const { hidden: d, intermediate: f, layers, heads, kvHeads } = TINY_HF;
  const vocab = options.vocab ?? TINY_HF.vocab;
  const hd = d / heads;
  const random = normals(options.seed ?? 1);
  const tensors = new Map<string, NamedTensor>();
  const add = (name: string, shape: number[], std: number, mean = 0) => {
    const size = shape.reduce((x, y) => x * y, 1);
    tensors.set(name, { shape, data: Float32Array.from({ length: size }, () => mean + random() * std) });
  };
  add("model.embed_tokens.weight", [vocab, d], 0.5);
  for (let i = 0; i < layers; i++) {
    const p = `model.layers.${i}`;
    add(`${p}.input_layernorm.weight`, [d], 0.1, 1);
    add(`${p}.self_attn.q_proj.weight`, [heads * hd, d], 0.3);
    add(`${p}.self_attn.k_proj.weight`, [kvHeads * hd, d], 0.3);
    add(`${p}.self_attn.v_proj.weight`, [kvHeads * hd, d], 0.3);
    if (architecture === "Qwen2ForCausalLM") {
      add(`${p}.self_attn.q_proj.bias`, [heads * hd], 0.2);
      add(`${p}.self_attn.k_proj.bias`, [kvHeads * hd], 0.2);
      add(`${p}.self_attn.v_proj.bias`, [kvHeads * hd], 0.2);
    }
    add(`${p}.self_attn.o_proj.weight`, [d, heads * hd], 0.2);
    add(`${p}.post_attention_layernorm.weight`, [d], 0.1, 1);
    add(`${p}.mlp.gate_proj.weight`, [f, d], 0.3);
    add(`${p}.mlp.up_proj.weight`, [f, d], 0.3);
    add(`${p}.mlp.down_proj.weight`, [d, f], 0.2);
  }
  add("model.norm.weight", [d], 0.1, 1);
  if (!tied) add("lm_head.weight", [vocab, d], 0.3);

  mkdirSync(dir, { recursive: true });
  const shards = options.shards ?? 1;
  const names = [...tensors.keys()];
  if (shards === 1) writeFileSync(join(dir, "model.safetensors"), encodeSafetensors(tensors, { format: "pt" }, dtype));
  else {
    const weightMap: Record<string, string> = {};
    const per = Math.ceil(names.length / shards);
    for (let s = 0; s < shards; s++) {
      const file = `model-${String(s + 1).padStart(5, "0")}-of-${String(shards).padStart(5, "0")}.safetensors`;
      const part = new Map(names.slice(s * per, (s + 1) * per).map((n) => [n, tensors.get(n)!]));
      for (const n of part.keys()) weightMap[n] = file;
      writeFileSync(join(dir, file), encodeSafetensors(part, { format: "pt" }, dtype));
    }
    writeFileSync(
      join(dir, "model.safetensors.index.json"),
      JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }, null, 2),
    );
  }
  const torchDtype = { F32: "float32", BF16: "bfloat16", F16: "float16" }[dtype];
  const config: Record<string, unknown> = {
    architectures: [architecture],
    model_type: architecture === "Qwen2ForCausalLM" ? "qwen2" : "llama",
    vocab_size: vocab,
    hidden_size: d,
    intermediate_size: f,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: kvHeads,
    max_position_embeddings: options.context ?? TINY_HF.context,
    rope_theta: TINY_HF.ropeTheta,
    rms_norm_eps: TINY_HF.eps,
    tie_word_embeddings: tied,
    hidden_act: "silu",
    rope_scaling: null,
    torch_dtype: torchDtype,
    bos_token_id: 256,
    eos_token_id: 258,
    ...(architecture === "Qwen2ForCausalLM"
      ? { use_sliding_window: false, sliding_window: 4096, max_window_layers: layers }
      : { attention_bias: false, mlp_bias: false }),
    ...options.configOverrides,
  };
  writeFileSync(join(dir, "config.json"), JSON.stringify(config, null, 2));
  if (options.tokenizerFiles) {
    writeFileSync(join(dir, "tokenizer.json"), options.tokenizerFiles.tokenizerJson);
    writeFileSync(join(dir, "tokenizer_config.json"), options.tokenizerFiles.tokenizerConfig);
    return tensors;
  }
  const corpus = [
    "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\nThe answer is 5.<|im_end|>\n",
    '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
  ];
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(trainTokenizer(corpus, 300)));
  writeFileSync(
    join(dir, "tokenizer_config.json"),
    JSON.stringify({ chat_template: CHAT_TEMPLATE, eos_token: "<|im_end|>", pad_token: "<|endoftext|>" }, null, 2),
  );
  writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: [258, 256], top_p: 0.8 }));
  return tensors;
}
