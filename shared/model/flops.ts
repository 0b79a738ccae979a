import type { ModelConfig } from "../config/policy.ts";

/**
 * Model FLOPs of the transformer, counted as matMul work only (2 per multiply-add): the dense
 * projections and the head, plus causal attention's Q·Kᵀ and P·V. Norms, softmax, rotary and the
 * optimizer are left out (a few percent at these shapes). A rate made from these is "model FLOP/s",
 * comparable across backends, not the hardware's own count.
 */

/** Multiply-adds per token in the dense weights: q|k|v, o, gate, up, down per layer, and the head. */
export function denseMacsPerToken(model: ModelConfig): number {
  const d = model.dModel;
  const hd = d / model.heads;
  const qkv = (model.heads + 2 * model.kvHeads) * hd;
  const perLayer = d * qkv + model.heads * hd * d + 3 * d * model.ffnHidden;
  return model.layers * perLayer + d * model.vocabSize;
}

/**
 * Forward FLOPs over whole sequences of the given lengths. Attention per layer and sequence of T
 * tokens: Q·Kᵀ and P·V over the causal half, 2 · 2 · heads·hd · T²/2 = 2·heads·hd·T².
 * @example forwardFlops(config, [512, 512])
 */
export function forwardFlops(model: ModelConfig, lengths: readonly number[]): number {
  const width = model.heads * (model.dModel / model.heads);
  let flops = 0;
  for (const T of lengths) flops += 2 * denseMacsPerToken(model) * T + model.layers * 2 * width * T * T;
  return flops;
}

/** A training step's FLOPs: the forward and a backward of twice its work (gradients of inputs and weights). */
export function trainFlops(model: ModelConfig, lengths: readonly number[]): number {
  return 3 * forwardFlops(model, lengths);
}

/** One decoded token at cache position `position`: the dense work plus attention over position + 1 keys. */
export function decodeFlops(model: ModelConfig, position: number): number {
  const width = model.heads * (model.dModel / model.heads);
  return 2 * denseMacsPerToken(model) + model.layers * 4 * width * (position + 1);
}
