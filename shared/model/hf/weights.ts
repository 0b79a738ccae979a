import type { ModelConfig } from "../../config/policy.ts";
import type { NamedTensor } from "../safetensors.ts";
import { parameterShapes } from "../transformer.ts";
import { HfFormatError } from "./config.ts";

/**
 * Tensor names and layouts between transformers' Qwen2/Llama checkpoints and this project's.
 * transformers stores nn.Linear weights [out, in] (y = x·Wᵀ) with separate q/k/v projections;
 * this project stores [in, out] (y = x·W) with q|k|v fused column-wise. Both use the rotate-half
 * rotary layout, so no head permutation is needed.
 */

/** [rows, cols] row-major → [cols, rows] row-major. */
function transpose(data: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(data.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c]!;
  return out;
}

/** The HF tensor names of one config, in transformers' state-dict order. */
export function hfTensorNames(config: ModelConfig): string[] {
  const names = ["model.embed_tokens.weight"];
  for (let i = 0; i < config.layers; i++) {
    const p = `model.layers.${i}`;
    names.push(
      `${p}.input_layernorm.weight`,
      `${p}.self_attn.q_proj.weight`,
      ...(config.qkvBias ? [`${p}.self_attn.q_proj.bias`] : []),
      `${p}.self_attn.k_proj.weight`,
      ...(config.qkvBias ? [`${p}.self_attn.k_proj.bias`] : []),
      `${p}.self_attn.v_proj.weight`,
      ...(config.qkvBias ? [`${p}.self_attn.v_proj.bias`] : []),
      `${p}.self_attn.o_proj.weight`,
      `${p}.post_attention_layernorm.weight`,
      `${p}.mlp.gate_proj.weight`,
      `${p}.mlp.up_proj.weight`,
      `${p}.mlp.down_proj.weight`,
    );
  }
  names.push("model.norm.weight");
  if (!config.tieEmbeddings) names.push("lm_head.weight");
  return names;
}

/** Expected [out, in] (or [n]) shape of every HF tensor of `config`. */
function hfShapes(config: ModelConfig): Map<string, number[]> {
  const d = config.dModel;
  const hd = d / config.heads;
  const q = config.heads * hd;
  const kv = config.kvHeads * hd;
  const shapes = new Map<string, number[]>([["model.embed_tokens.weight", [config.vocabSize, d]]]);
  for (let i = 0; i < config.layers; i++) {
    const p = `model.layers.${i}`;
    shapes.set(`${p}.input_layernorm.weight`, [d]);
    shapes.set(`${p}.self_attn.q_proj.weight`, [q, d]);
    shapes.set(`${p}.self_attn.k_proj.weight`, [kv, d]);
    shapes.set(`${p}.self_attn.v_proj.weight`, [kv, d]);
    if (config.qkvBias) {
      shapes.set(`${p}.self_attn.q_proj.bias`, [q]);
      shapes.set(`${p}.self_attn.k_proj.bias`, [kv]);
      shapes.set(`${p}.self_attn.v_proj.bias`, [kv]);
    }
    shapes.set(`${p}.self_attn.o_proj.weight`, [d, q]);
    shapes.set(`${p}.post_attention_layernorm.weight`, [d]);
    shapes.set(`${p}.mlp.gate_proj.weight`, [config.ffnHidden, d]);
    shapes.set(`${p}.mlp.up_proj.weight`, [config.ffnHidden, d]);
    shapes.set(`${p}.mlp.down_proj.weight`, [d, config.ffnHidden]);
  }
  shapes.set("model.norm.weight", [d]);
  if (!config.tieEmbeddings) shapes.set("lm_head.weight", [config.vocabSize, d]);
  return shapes;
}

/**
 * This project's parameter values (checkpoint names, [in, out]) from HF tensors. Every tensor the
 * config needs must be present with its exact shape; extra tensors are an error too (they would
 * be silently dropped weights), except a tied checkpoint's redundant lm_head and rotary buffers.
 */
export function valuesFromHf(
  config: ModelConfig,
  tensors: ReadonlyMap<string, NamedTensor>,
): Map<string, Float32Array> {
  const shapes = hfShapes(config);
  const get = (name: string): Float32Array => {
    const tensor = tensors.get(name);
    if (!tensor) throw new HfFormatError(`weights: ${name} is missing`);
    const expected = shapes.get(name)!;
    if (tensor.shape.join(",") !== expected.join(","))
      throw new HfFormatError(`weights: ${name} has shape [${tensor.shape}], config.json needs [${expected}]`);
    return tensor.data;
  };
  const ignorable = (name: string) =>
    name.endsWith("rotary_emb.inv_freq") || (config.tieEmbeddings && name === "lm_head.weight");
  for (const name of tensors.keys())
    if (!shapes.has(name) && !ignorable(name))
      throw new HfFormatError(`weights: ${name} is not a tensor of this architecture (unsupported layer?)`);

  const d = config.dModel;
  const hd = d / config.heads;
  const qWidth = config.heads * hd;
  const kvWidth = config.kvHeads * hd;
  const width = qWidth + 2 * kvWidth;
  const values = new Map<string, Float32Array>();
  values.set("embed", Float32Array.from(get("model.embed_tokens.weight")));
  for (let i = 0; i < config.layers; i++) {
    const p = `model.layers.${i}`;
    // Stack q, k, v as [width, d] rows, then transpose once to [d, width].
    const stacked = new Float32Array(width * d);
    stacked.set(get(`${p}.self_attn.q_proj.weight`), 0);
    stacked.set(get(`${p}.self_attn.k_proj.weight`), qWidth * d);
    stacked.set(get(`${p}.self_attn.v_proj.weight`), (qWidth + kvWidth) * d);
    values.set(`layers.${i}.attn_norm`, Float32Array.from(get(`${p}.input_layernorm.weight`)));
    values.set(`layers.${i}.attn.wqkv`, transpose(stacked, width, d));
    if (config.qkvBias) {
      const bias = new Float32Array(width);
      bias.set(get(`${p}.self_attn.q_proj.bias`), 0);
      bias.set(get(`${p}.self_attn.k_proj.bias`), qWidth);
      bias.set(get(`${p}.self_attn.v_proj.bias`), qWidth + kvWidth);
      values.set(`layers.${i}.attn.bqkv`, bias);
    }
    values.set(`layers.${i}.attn.wo`, transpose(get(`${p}.self_attn.o_proj.weight`), d, qWidth));
    values.set(`layers.${i}.ffn_norm`, Float32Array.from(get(`${p}.post_attention_layernorm.weight`)));
    values.set(`layers.${i}.ffn.w_gate`, transpose(get(`${p}.mlp.gate_proj.weight`), config.ffnHidden, d));
    values.set(`layers.${i}.ffn.w_up`, transpose(get(`${p}.mlp.up_proj.weight`), config.ffnHidden, d));
    values.set(`layers.${i}.ffn.w_down`, transpose(get(`${p}.mlp.down_proj.weight`), d, config.ffnHidden));
  }
  values.set("final_norm", Float32Array.from(get("model.norm.weight")));
  // lm_head is stored [d, V] here; transformers' is [V, d].
  if (!config.tieEmbeddings) values.set("lm_head", transpose(get("lm_head.weight"), config.vocabSize, d));
  return values;
}

/** HF tensors (transformers names, [out, in]) from this project's parameter values. */
export function hfTensorsFromValues(
  config: ModelConfig,
  values: ReadonlyMap<string, Float32Array>,
): Map<string, NamedTensor> {
  for (const { name, shape } of parameterShapes(config)) {
    const size = shape.reduce((a, b) => a * b, 1);
    if (values.get(name)?.length !== size)
      throw new HfFormatError(`checkpoint: parameter ${name} needs ${size} values of shape [${shape}]`);
  }
  const shapes = hfShapes(config);
  const d = config.dModel;
  const hd = d / config.heads;
  const qWidth = config.heads * hd;
  const kvWidth = config.kvHeads * hd;
  const width = qWidth + 2 * kvWidth;
  const v = (name: string) => values.get(name)!;
  const flat = new Map<string, Float32Array>();
  flat.set("model.embed_tokens.weight", v("embed"));
  for (let i = 0; i < config.layers; i++) {
    const p = `model.layers.${i}`;
    const rows = transpose(v(`layers.${i}.attn.wqkv`), d, width);
    flat.set(`${p}.input_layernorm.weight`, v(`layers.${i}.attn_norm`));
    flat.set(`${p}.self_attn.q_proj.weight`, rows.slice(0, qWidth * d));
    flat.set(`${p}.self_attn.k_proj.weight`, rows.slice(qWidth * d, (qWidth + kvWidth) * d));
    flat.set(`${p}.self_attn.v_proj.weight`, rows.slice((qWidth + kvWidth) * d));
    if (config.qkvBias) {
      const bias = v(`layers.${i}.attn.bqkv`);
      flat.set(`${p}.self_attn.q_proj.bias`, bias.slice(0, qWidth));
      flat.set(`${p}.self_attn.k_proj.bias`, bias.slice(qWidth, qWidth + kvWidth));
      flat.set(`${p}.self_attn.v_proj.bias`, bias.slice(qWidth + kvWidth));
    }
    flat.set(`${p}.self_attn.o_proj.weight`, transpose(v(`layers.${i}.attn.wo`), qWidth, d));
    flat.set(`${p}.post_attention_layernorm.weight`, v(`layers.${i}.ffn_norm`));
    flat.set(`${p}.mlp.gate_proj.weight`, transpose(v(`layers.${i}.ffn.w_gate`), d, config.ffnHidden));
    flat.set(`${p}.mlp.up_proj.weight`, transpose(v(`layers.${i}.ffn.w_up`), d, config.ffnHidden));
    flat.set(`${p}.mlp.down_proj.weight`, transpose(v(`layers.${i}.ffn.w_down`), config.ffnHidden, d));
  }
  flat.set("model.norm.weight", v("final_norm"));
  if (!config.tieEmbeddings) flat.set("lm_head.weight", transpose(v("lm_head"), d, config.vocabSize));
  return new Map(hfTensorNames(config).map((name) => [name, { shape: shapes.get(name)!, data: flat.get(name)! }]));
}
