import * as tf from "@tensorflow/tfjs";
import type { Dims, RotaryTable } from "./ops.ts";

/**
 * The transformer's ops for device backends (webgpu, tensorflow): TF.js ops end to end,
 * differentiated by TF.js, so activations and their gradients never leave the device. ops.ts
 * dispatches here when tensors do not live in host memory; on wasm and cpu its host loops stay
 * the fast form (design.md "TF.js notes"). Same math as ops.ts: the numerics tests compare the two.
 */

/** True where a tensor's data is host memory (wasm, cpu): there a JS loop over it is a memcpy away. */
export function dataOnHost(): boolean {
  const backend = tf.getBackend();
  return backend === "wasm" || backend === "cpu";
}

/** Embedding rows for `ids` ([N] → [N, d]); the gradient is TF.js's scatter-add (UnsortedSegmentSum) on the device. */
export function embedOnDevice(table: tf.Tensor2D, ids: Int32Array): tf.Tensor2D {
  return tf.tidy(() => tf.gather(table, tf.tensor1d(ids, "int32")));
}

/** y = x / rms(x) · g over the rows of x [N, d]. */
export function rmsNormOnDevice(x: tf.Tensor2D, gain: tf.Tensor1D, eps: number): tf.Tensor2D {
  return tf.tidy(() => {
    const inverse = tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps));
    return tf.mul(tf.mul(x, inverse), gain);
  });
}

/**
 * cos and sin of a rotary table as [positions, 1, headDim] (each half-angle twice), per backend and
 * table shape: every policy version of a model shares one pair (a pair per version would leak).
 */
const rotaryTensors = new Map<string, { cos: tf.Tensor3D; sin: tf.Tensor3D }>();

function rotaryTable(rope: RotaryTable): { cos: tf.Tensor3D; sin: tf.Tensor3D } {
  const key = `${tf.getBackend()}:${rope.positions}:${rope.half}:${rope.theta}`;
  let full = rotaryTensors.get(key);
  if (!full || full.cos.isDisposed) {
    const { positions, half } = rope;
    const cos = new Float32Array(positions * 2 * half);
    const sin = new Float32Array(positions * 2 * half);
    for (let p = 0; p < positions; p++) {
      for (let i = 0; i < half; i++) {
        for (const o of [0, half]) {
          cos[p * 2 * half + o + i] = rope.cos[p * half + i]!;
          sin[p * 2 * half + o + i] = rope.sin[p * half + i]!;
        }
      }
    }
    // Kept outside any tidy: one pair per table for the process's life.
    full = {
      cos: tf.keep(tf.tensor3d(cos, [positions, 1, 2 * half])),
      sin: tf.keep(tf.tensor3d(sin, [positions, 1, 2 * half])),
    };
    rotaryTensors.set(key, full);
  }
  return full;
}

/** cos/sin rows [n, 1, hd] for the given positions (a decode step's rows sit at different positions). */
export function rotaryAt(rope: RotaryTable, positions: Int32Array): { cos: tf.Tensor3D; sin: tf.Tensor3D } {
  const { cos, sin } = rotaryTable(rope);
  const index = tf.tensor1d(positions, "int32");
  return { cos: tf.gather(cos, index), sin: tf.gather(sin, index) };
}

/** cos/sin rows [length, 1, hd] of positions 0 .. length − 1. */
function rotaryPrefix(rope: RotaryTable, length: number): { cos: tf.Tensor3D; sin: tf.Tensor3D } {
  const { cos, sin } = rotaryTable(rope);
  return {
    cos: tf.slice(cos, [0, 0, 0], [length, 1, 2 * rope.half]),
    sin: tf.slice(sin, [0, 0, 0], [length, 1, 2 * rope.half]),
  };
}

/**
 * Additive causal mask [n, 1, T] for queries at positions first .. first + n − 1 over keys
 * 0 .. T − 1 (−1e30 where the key comes after the query), made on the device from two ranges.
 */
function causalMask(n: number, keys: number, first: number): tf.Tensor3D {
  const queries = tf.reshape(tf.range(first, first + n, 1, "int32"), [n, 1]);
  const later = tf.greater(tf.reshape(tf.range(0, keys, 1, "int32"), [1, keys]), queries);
  return tf.reshape(tf.where(later, tf.fill([n, keys], -1e30), tf.zeros([n, keys])), [n, 1, keys]);
}

/** Rotates heads [n, heads, hd] by their rows' cos/sin [n, 1, hd] (Llama's rotate_half: pairs i and i + hd/2). */
export function rotate(x: tf.Tensor3D, cos: tf.Tensor3D, sin: tf.Tensor3D): tf.Tensor3D {
  const half = x.shape[2] / 2;
  const [x1, x2] = tf.split(x, [half, half], 2) as [tf.Tensor3D, tf.Tensor3D];
  const rotated = tf.concat([tf.neg(x2), x1], 2);
  return tf.add(tf.mul(x, cos), tf.mul(rotated, sin));
}

/**
 * Grouped-query attention of one sequence's queries q [n, heads, hd] (rotated, at positions
 * first .. first + n − 1) over its keys and values [T, kvHeads, hd] (keys rotated), causal.
 * The query heads of each kv head are stacked position-major ([kv, n·rep, hd]) so one batched
 * matMul per kv head serves them. Returns [n, heads·hd].
 */
export function attendSequence(q: tf.Tensor3D, k: tf.Tensor3D, v: tf.Tensor3D, first: number): tf.Tensor2D {
  const [n, H, hd] = q.shape;
  const [T, KV] = k.shape;
  const rep = H / KV;
  return tf.tidy(() => {
    // [n, KV, rep, hd] → [KV, n·rep, hd]: row t·rep + r is query head g·rep + r at position first + t.
    const qg = tf.reshape(tf.transpose(tf.reshape(q, [n, KV, rep, hd]), [1, 0, 2, 3]), [KV, n * rep, hd]);
    const kg = tf.mul(tf.transpose(k, [1, 0, 2]), 1 / Math.sqrt(hd));
    const vg = tf.transpose(v, [1, 0, 2]);
    let scores = tf.matMul(qg, kg, false, true);
    // A single query at the last position sees every key: no mask.
    if (n > 1 || first + n < T)
      scores = tf.reshape(tf.add(tf.reshape(scores, [KV, n, rep, T]), causalMask(n, T, first)), [KV, n * rep, T]);
    const out = tf.matMul(tf.softmax(scores), vg);
    return tf.reshape(tf.transpose(tf.reshape(out, [KV, n, rep, hd]), [1, 0, 2, 3]), [n, H * hd]);
  });
}

/**
 * Causal grouped-query attention with rotary positions over packed sequences (rows of sequence b
 * contiguous, positions restarting at 0), fused q|k|v [N, qkvWidth] → [N, heads·headDim].
 */
export function attentionOnDevice(
  qkv: tf.Tensor2D,
  seqLens: readonly number[],
  dims: Dims,
  rope: RotaryTable,
): tf.Tensor2D {
  const { heads: H, kvHeads: KV, headDim: hd, qkvWidth: C } = dims;
  return tf.tidy(() => {
    const outputs: tf.Tensor2D[] = [];
    let offset = 0;
    for (const L of seqLens) {
      const rows = seqLens.length === 1 ? qkv : tf.slice(qkv, [offset, 0], [L, C]);
      offset += L;
      const { cos, sin } = rotaryPrefix(rope, L);
      const q = rotate(tf.reshape(tf.slice(rows, [0, 0], [L, H * hd]), [L, H, hd]), cos, sin);
      const k = rotate(tf.reshape(tf.slice(rows, [0, H * hd], [L, KV * hd]), [L, KV, hd]), cos, sin);
      const v = tf.reshape(tf.slice(rows, [0, (H + KV) * hd], [L, KV * hd]), [L, KV, hd]) as tf.Tensor3D;
      outputs.push(attendSequence(q, k, v, 0));
    }
    return outputs.length === 1 ? (outputs[0] as tf.Tensor2D) : tf.concat(outputs, 0);
  });
}
