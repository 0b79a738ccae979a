import * as tf from "@tensorflow/tfjs";
import type { DrawnToken, TokenDraw } from "./types.ts";

/**
 * drawToken (sampling.ts) as TF.js ops, for the device decoders: the [rows, vocab] logits stay on
 * the device and a step reads back [rows, 3] (token, logprob, sampledLogprob). Same rule and same
 * uniform number as the host, so the same token is drawn except where float32 sums on the device
 * put a cumulative weight on the other side of the draw than the host's float64 does (one draw
 * in millions at these scales; the log-probs agree to float32 rounding).
 */

/** Columns of the tensor drawOnDevice returns. */
const COLUMNS = 3;

/** Draws one token per row of `logits` ([rows, vocab]); returns [rows, 3]: token, logprob, sampledLogprob. */
export function drawOnDevice(logits: tf.Tensor2D, draws: readonly TokenDraw[]): tf.Tensor2D {
  const [rows, vocab] = logits.shape;
  if (draws.length !== rows) throw new RangeError(`drawOnDevice: ${rows} rows but ${draws.length} draws`);
  return tf.tidy(() => {
    const column = (values: number[]) => tf.tensor2d(values, [rows, 1]);
    const scale = column(draws.map((d) => (d.temperature > 0 ? 1 / d.temperature : 1)));
    const uniform = column(draws.map((d) => d.uniform));
    const topP = column(draws.map((d) => d.topP));
    const scaled = tf.mul(logits, scale);
    const max = tf.max(scaled, 1, true);
    const weights = tf.exp(tf.sub(scaled, max));
    const total = tf.sum(weights, 1, true);
    const logProbs = tf.sub(scaled, tf.add(max, tf.log(total)));
    const at = (values: tf.Tensor, index: tf.Tensor1D) =>
      tf.sum(tf.mul(values, tf.oneHot(index, vocab, 1, 0, "float32")), 1);
    // The smallest index where `mask` holds (vocab where none does). Not argMax: which of equal
    // maxima it returns differs between backends.
    const indices = tf.range(0, vocab, 1, "int32").expandDims(0);
    const past = tf.scalar(vocab, "int32");
    const firstTrue = (mask: tf.Tensor) => tf.min(tf.where(mask, indices, past), 1) as tf.Tensor1D;

    // Greedy: the first largest logit, at temperature 1.
    const greedy = firstTrue(tf.equal(logits, tf.max(logits, 1, true)));
    // Full vocabulary: the first token in index order whose cumulative weight passes uniform × total;
    // none (rounding): the last token with any weight.
    const cumulative = tf.cumsum(weights, 1);
    const passed = tf.greater(cumulative, tf.mul(uniform, total));
    const lastPositive = tf.sub(
      tf.scalar(vocab - 1, "int32"),
      firstTrue(tf.reverse(tf.greater(weights, 0), 1)),
    ) as tf.Tensor1D;
    const full = tf.where(tf.any(passed, 1), firstTrue(passed), lastPositive) as tf.Tensor1D;

    let token = tf.where(isGreedy(draws), greedy, full) as tf.Tensor1D;
    let logShare = tf.zeros([rows]) as tf.Tensor1D;
    if (draws.some((d) => d.temperature > 0 && d.topP < 1)) {
      // Nucleus: sorted by weight, the tokens whose preceding cumulative weight is below top_p × total
      // (at least one); drawn from them by uniform × their mass.
      const { values: sorted, indices: order } = tf.topk(weights, vocab, true);
      const sortedCumulative = tf.cumsum(sorted, 1);
      const before = tf.sub(sortedCumulative, sorted);
      const one = tf.scalar(1, "int32");
      const kept = tf.maximum(tf.sum(tf.cast(tf.less(before, tf.mul(topP, total)), "int32"), 1), one) as tf.Tensor1D;
      const lastKept = tf.sub(kept, one) as tf.Tensor1D;
      const mass = at(sortedCumulative, lastKept);
      const inNucleus = tf.less(indices, kept.expandDims(1));
      const hit = tf.logicalAnd(tf.greater(sortedCumulative, tf.mul(uniform, mass.expandDims(1))), inNucleus);
      const position = tf.where(tf.any(hit, 1), firstTrue(hit), lastKept) as tf.Tensor1D;
      const nucleusToken = tf.cast(at(tf.cast(order, "float32"), position), "int32") as tf.Tensor1D;
      const nucleus = tensorOf(draws.map((d) => d.temperature > 0 && d.topP < 1));
      token = tf.where(nucleus, nucleusToken, token) as tf.Tensor1D;
      logShare = tf.where(nucleus, tf.log(tf.div(mass, tf.squeeze(total, [1]))), logShare) as tf.Tensor1D;
    }
    const logprob = at(logProbs, token);
    const sampledLogprob = tf.where(isGreedy(draws), tf.zerosLike(logprob), tf.sub(logprob, logShare));
    return tf.stack([tf.cast(token, "float32"), logprob, sampledLogprob], 1) as tf.Tensor2D;
  });
}

/** The rows of a drawOnDevice result read back ([rows × 3] values). */
export function drawnTokens(values: Float32Array): DrawnToken[] {
  return Array.from({ length: values.length / COLUMNS }, (_, i) => ({
    token: values[i * COLUMNS] as number,
    logprob: values[i * COLUMNS + 1] as number,
    sampledLogprob: values[i * COLUMNS + 2] as number,
  }));
}

function tensorOf(flags: boolean[]): tf.Tensor1D {
  return tf.tensor1d(flags.map(Number), "bool");
}

function isGreedy(draws: readonly TokenDraw[]): tf.Tensor1D {
  return tensorOf(draws.map((d) => d.temperature === 0));
}
