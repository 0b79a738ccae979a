import type { ModelConfig } from "../config/policy.ts";

/** Bytes of one float32 element: TF.js trains in float32 on every backend. */
const FLOAT32 = 4;

/** What one training step holds on the device, in bytes, for a model and a micro-batch. */
export interface TrainingMemoryEstimate {
  readonly parameters: number;
  /** Tokens in one forward/backward micro-batch: trainer.microBatchTokens, or one whole sequence when that is longer. */
  readonly microBatchTokens: number;
  /** Longest sequence (attention is quadratic in it): min(contextLength, rollout.maxTotalTokens). */
  readonly sequenceLength: number;
  readonly bytes: {
    /** The trainable weights. */
    readonly weights: number;
    /** The step's gradient accumulator plus one micro-batch's gradients (gradient accumulation). */
    readonly gradients: number;
    /** Adam's first and second moments. */
    readonly adamMoments: number;
    /** What autodiff keeps per layer for the backward pass, over one micro-batch. */
    readonly activations: number;
    /** Logits, their softmax and the logits' gradient: three [tokens, vocab] arrays. */
    readonly logits: number;
    readonly total: number;
  };
}

/** Trainable parameters of the Llama/Qwen2 block this project implements (embedding, layers, final norm, untied head). */
export function parameterCount(model: ModelConfig): number {
  const d = model.dModel;
  const hd = d / model.heads;
  const qkv = (model.heads + 2 * model.kvHeads) * hd;
  const perLayer = d + d * qkv + (model.qkvBias ? qkv : 0) + model.heads * hd * d + d + 3 * d * model.ffnHidden;
  return model.vocabSize * d + model.layers * perLayer + d + (model.tieEmbeddings ? 0 : d * model.vocabSize);
}

/**
 * A float32 estimate of one training step's device memory (what `agentrl policy estimate-memory`
 * prints). Per layer and token, autodiff keeps: the block input, both RMSNorm outputs and the
 * residual after attention (4·d), the fused q|k|v projection and its rotated q/k
 * ((heads + 2·kvHeads)·hd + (heads + kvHeads)·hd), the attention output (heads·hd), the SwiGLU
 * gate, up, silu(gate) and product (4·ffnHidden), and the attention scores and probabilities
 * (2·heads·L, every sequence taken as long as the longest, L). Kernel workspace is not counted.
 * @example estimateTrainingMemory(model, { microBatchTokens: 4096, sequenceTokens: 2048 }).bytes.total
 */
export function estimateTrainingMemory(
  model: ModelConfig,
  batch: { readonly microBatchTokens: number; readonly sequenceTokens: number },
): TrainingMemoryEstimate {
  const parameters = parameterCount(model);
  const L = Math.min(model.contextLength, batch.sequenceTokens);
  // A micro-batch holds at least one whole sequence (trajectories are never split).
  const T = Math.max(batch.microBatchTokens, L);
  const d = model.dModel;
  const hd = d / model.heads;
  const perTokenPerLayer =
    4 * d +
    (model.heads + 2 * model.kvHeads) * hd +
    (model.heads + model.kvHeads) * hd +
    model.heads * hd +
    4 * model.ffnHidden +
    2 * model.heads * L;
  const weights = parameters * FLOAT32;
  const gradients = 2 * parameters * FLOAT32;
  const adamMoments = 2 * parameters * FLOAT32;
  const activations = T * model.layers * perTokenPerLayer * FLOAT32;
  const logits = 3 * T * model.vocabSize * FLOAT32;
  return {
    parameters,
    microBatchTokens: T,
    sequenceLength: L,
    bytes: {
      weights,
      gradients,
      adamMoments,
      activations,
      logits,
      total: weights + gradients + adamMoments + activations + logits,
    },
  };
}

/** `1.84 GiB`-style text for a byte count. */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit === 0 ? 0 : 2)} ${units[unit]}`;
}
