import * as tf from "@tensorflow/tfjs";
import { BackendWasm } from "@tensorflow/tfjs-backend-wasm";
import type { TransformerPolicy } from "./transformer.ts";

/** One block's weights as a decode pass uses them. */
interface DecodeLayer {
  readonly attnNorm: Float32Array;
  readonly ffnNorm: Float32Array;
  /** [qkvWidth] on the host, or undefined without q/k/v biases. */
  readonly bqkv: Float32Array | undefined;
  /** [d, qkvWidth], the policy's own variable. */
  readonly wqkv: tf.Tensor2D;
  /** [heads·hd, d], the policy's own variable. */
  readonly wo: tf.Tensor2D;
  /** [d, 2·ffnHidden]: gate and up side by side, so one matMul serves both (owned). */
  readonly wGateUp: tf.Tensor2D;
  /** [ffnHidden, d], the policy's own variable. */
  readonly wDown: tf.Tensor2D;
}

/**
 * The weights of a policy laid out for decoding, derived once per (policy, optimizer step): the
 * embedding table and the norm gains on the host (the decoder keeps the residual stream there,
 * so a lookup or a norm is a loop, not a TF.js op with a copy each way), gate|up fused into one
 * matrix, and the LM head as a [d, V] matrix even with tied embeddings. Tensors the policy owns
 * are borrowed, the fused ones are owned and freed by `dispose`.
 */
export class DecodeWeights {
  readonly embed: Float32Array;
  readonly finalNorm: Float32Array;
  readonly layers: readonly DecodeLayer[];
  /** [d, V] */
  readonly head: tf.Tensor2D;
  private readonly owned: tf.Tensor[] = [];

  constructor(
    readonly policy: TransformerPolicy,
    /** The policy's optimizer step these were derived at (a training step changes the weights). */
    readonly step = policy.step,
  ) {
    const { config } = policy;
    const param = (name: string) => {
      const p = policy.params.get(name);
      if (!p) throw new Error(`decode weights: the policy has no parameter ${name}`);
      return p;
    };
    const host = (name: string) => param(name).dataSync() as Float32Array;
    this.embed = host("embed");
    this.finalNorm = host("final_norm");
    this.layers = Array.from({ length: config.layers }, (_, i) => {
      const wGateUp = tf.concat([param(`layers.${i}.ffn.w_gate`), param(`layers.${i}.ffn.w_up`)], 1) as tf.Tensor2D;
      this.owned.push(wGateUp);
      return {
        attnNorm: host(`layers.${i}.attn_norm`),
        ffnNorm: host(`layers.${i}.ffn_norm`),
        bqkv: config.qkvBias ? host(`layers.${i}.attn.bqkv`) : undefined,
        wqkv: param(`layers.${i}.attn.wqkv`) as tf.Tensor2D,
        wo: param(`layers.${i}.attn.wo`) as tf.Tensor2D,
        wGateUp,
        wDown: param(`layers.${i}.ffn.w_down`) as tf.Tensor2D,
      };
    });
    if (config.tieEmbeddings) {
      this.head = tf.transpose(param("embed")) as tf.Tensor2D;
      this.owned.push(this.head);
    } else this.head = param("lm_head") as tf.Tensor2D;
  }

  /** True while these still match the policy's weights. */
  current(policy: TransformerPolicy): boolean {
    return policy === this.policy && policy.step === this.step && !policy.isDisposed;
  }

  dispose(): void {
    for (const t of this.owned.splice(0)) t.dispose();
  }
}

/**
 * The float32 contents of `t` without a copy where the backend allows (wasm: a view into its heap,
 * valid until the next op or dispose), else a copy. Read it before running another op.
 */
export function viewOf(t: tf.Tensor): Float32Array {
  const backend = tf.backend();
  if (backend instanceof BackendWasm) return backend.typedArrayFromHeap(t) as Float32Array;
  return t.dataSync() as Float32Array;
}

/**
 * x·W for host rows x [n, k] (the first n·k floats of `x`); `use` reads the product [n, m] (a
 * transient view, see viewOf) and the tensors are freed before returning.
 */
export function hostMatMul(x: Float32Array, n: number, w: tf.Tensor2D, use: (product: Float32Array) => void): void {
  const k = w.shape[0];
  const input = tf.tensor2d(x.subarray(0, n * k), [n, k]);
  const product = tf.matMul(input, w);
  try {
    use(viewOf(product));
  } finally {
    input.dispose();
    product.dispose();
  }
}
