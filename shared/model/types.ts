import type * as tf from "@tensorflow/tfjs";
import type { ModelConfig } from "../config/policy.ts";

/**
 * The contract between the model (shared/model), the policy server (continuous batching) and the
 * trainer. Log-probs everywhere are of the sampling distribution: log_softmax(logits / temperature),
 * so the trainer's recomputed log-probs match what the server reported at generation time.
 */

/** Inference side: one loaded policy version. */
export interface InferencePolicy {
  readonly version: number;
  readonly config: ModelConfig;
  /** A decoder with `capacity` KV-cache slots (continuous batching: sequences join and leave between steps). */
  createDecoder(capacity: number): Decoder;
  dispose(): void;
}

/** How to draw one token: temperature (0 = greedy), nucleus and the uniform number to draw with. */
export interface TokenDraw {
  readonly temperature: number;
  readonly topP: number;
  /** Uniform in [0, 1) from the request's seeded stream; unused when greedy. */
  readonly uniform: number;
}

/** A drawn token and its two log-probs (shared/model/sampling.ts says which is which). */
export interface DrawnToken {
  readonly token: number;
  /** log_softmax(logits / temperature)[token] over the full vocabulary. */
  readonly logprob: number;
  /** Log-prob under the distribution the token was drawn from (nucleus renormalized; 0 when greedy). */
  readonly sampledLogprob: number;
}

export interface Decoder {
  readonly capacity: number;
  /** Version of the weights the next step will use. */
  readonly policyVersion: number;
  /** Number of slots in use. */
  readonly active: number;
  /** Prefills a free slot with the prompt; returns the slot and the next-token logits ([vocab]). Throws when full or when the prompt exceeds the context. */
  add(prompt: readonly number[]): { slot: number; logits: Float32Array };
  /** One batched decode step: slots[i] consumes tokens[i]; returns next-token logits per slot (same order). */
  step(slots: readonly number[], tokens: readonly number[]): Float32Array[];
  /**
   * `add`, then draws the first token. What the policy server calls: a device decoder draws on
   * the device and reads back only the token and its log-probs, not the [vocab] logits.
   */
  addAndDraw(prompt: readonly number[], draw: TokenDraw): { slot: number; drawn: DrawnToken };
  /** `step`, then draws each slot's next token (draws[i] for slots[i]); see addAndDraw. */
  stepAndDraw(slots: readonly number[], tokens: readonly number[], draws: readonly TokenDraw[]): DrawnToken[];
  /** Frees a slot (a decoder with a prefix cache may keep its cache for a next turn). */
  remove(slot: number): void;
  /** Prefix (KV) cache counters, when the decoder keeps one. */
  readonly prefixStats?: {
    readonly hits: number;
    readonly reusedTokens: number;
    readonly prefilledTokens: number;
  };
  /**
   * Switches weights between steps. In-flight sequences continue with the new weights on a cache
   * recomputed by them, so every later token is exactly the new version's.
   */
  setPolicy(policy: InferencePolicy): void;
  dispose(): void;
}

/** Training side. */
export interface TrainablePolicy {
  readonly config: ModelConfig;
  /** out[i][t] = log p(seq[t] | seq[<t]) under logits/temperature for t >= 1; out[i][0] = 0. */
  logProbs(sequences: readonly Int32Array[], temperature: number): Float32Array[];
  /**
   * One optimizer step over all `sequences`, run in micro-batches. For each micro-batch, `loss`
   * receives the per-token log-prob tensor [b, T] of its padded rows (same convention as logProbs)
   * and `rows`, the indices into `sequences` of those b rows; it returns that micro-batch's
   * contribution to the batch loss (e.g. a sum over its tokens divided by the batch's token count),
   * so gradients simply add up. The step then clips the global gradient norm and applies Adam.
   * Everything is disposed before it returns.
   */
  trainStep(
    sequences: readonly Int32Array[],
    temperature: number,
    loss: (logp: tf.Tensor2D, rows: readonly number[]) => tf.Scalar,
  ): { loss: number; gradNorm: number };
  /** A frozen copy of the current weights (the KL reference). */
  snapshot(): TrainablePolicy;
  dispose(): void;
}
