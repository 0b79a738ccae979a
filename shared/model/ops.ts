import * as tf from "@tensorflow/tfjs";
import { attentionOnDevice, dataOnHost, embedOnDevice, rmsNormOnDevice } from "./deviceOps.ts";

/**
 * Fused transformer ops with hand-written gradients, shaped by what is fast on the wasm backend
 * (design.md "TF.js notes"): matMul only in its plain 2-D form (gradients transpose explicitly),
 * embedding lookup without tf.gather's missing gradient, no slice/split gradients (pads of the
 * whole input), no broadcasting; element-wise work (RMSNorm, SwiGLU, rotary, softmax-loss) runs as
 * plain loops over the tensor's data, which on wasm is a memcpy away. On a device backend (webgpu,
 * tensorflow) those loops would copy every activation to the host and back: there embed, rmsNorm
 * and attention are device ops (deviceOps.ts) and tokenLogProbs takes its device form.
 */

/** Static sizes every op needs. */
export interface Dims {
  readonly dModel: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly headDim: number;
  /** Columns of the fused q|k|v projection: (heads + 2·kvHeads)·headDim. */
  readonly qkvWidth: number;
  readonly ffnHidden: number;
  readonly vocabSize: number;
  readonly normEps: number;
}

/** cos/sin of position·θ^(−2i/headDim), [contextLength, headDim/2], shared by training and decoding. */
export class RotaryTable {
  readonly cos: Float32Array;
  readonly sin: Float32Array;
  readonly half: number;
  constructor(
    readonly positions: number,
    headDim: number,
    readonly theta: number,
  ) {
    this.half = headDim / 2;
    this.cos = new Float32Array(positions * this.half);
    this.sin = new Float32Array(positions * this.half);
    for (let p = 0; p < positions; p++) {
      for (let i = 0; i < this.half; i++) {
        const angle = p * theta ** ((-2 * i) / headDim);
        this.cos[p * this.half + i] = Math.cos(angle);
        this.sin[p * this.half + i] = Math.sin(angle);
      }
    }
  }

  /** Rotates `count` consecutive heads starting at buf[offset] for position `pos` (Llama rotate_half convention). */
  rotate(buf: Float32Array, offset: number, count: number, pos: number): void {
    const half = this.half;
    const base = pos * half;
    for (let h = 0; h < count; h++) {
      const o = offset + h * 2 * half;
      for (let i = 0; i < half; i++) {
        const c = this.cos[base + i]!;
        const s = this.sin[base + i]!;
        const a = buf[o + i]!;
        const b = buf[o + i + half]!;
        buf[o + i] = a * c - b * s;
        buf[o + i + half] = b * c + a * s;
      }
    }
  }

  /** The transpose (inverse) rotation, for gradients. */
  unrotate(buf: Float32Array, offset: number, count: number, pos: number): void {
    const half = this.half;
    const base = pos * half;
    for (let h = 0; h < count; h++) {
      const o = offset + h * 2 * half;
      for (let i = 0; i < half; i++) {
        const c = this.cos[base + i]!;
        const s = this.sin[base + i]!;
        const a = buf[o + i]!;
        const b = buf[o + i + half]!;
        buf[o + i] = a * c + b * s;
        buf[o + i + half] = b * c - a * s;
      }
    }
  }
}

function data(t: tf.Tensor): Float32Array {
  return t.dataSync() as Float32Array;
}

/**
 * Runs `fn` in a tf.tidy scope and returns its plain (non-tensor) result. Returning a typed array
 * straight from tf.tidy is slow: tidy walks every element looking for tensors.
 */
export function tidyRead<T>(fn: () => T): T {
  let result: T | undefined;
  tf.tidy(() => {
    result = fn();
  });
  return result as T;
}

type Forward<T extends tf.Tensor> = (save: tf.GradSaveFunc) => {
  value: T;
  gradFunc: (dy: T, saved: tf.Tensor[]) => tf.Tensor | tf.Tensor[];
};

/** tf.customGrad with the inputs captured by `forward`; the gradient returns one tensor per input, in order. */
function customOp<T extends tf.Tensor>(inputs: tf.Tensor[], forward: Forward<T>): T {
  const op = tf.customGrad<T>((...args) => forward(args[args.length - 1] as tf.GradSaveFunc));
  return op(...inputs);
}

/** Embedding rows for `ids` ([N] → [N, d]); the gradient scatter-adds rows in JS. */
export function embed(table: tf.Tensor2D, ids: Int32Array): tf.Tensor2D {
  if (!dataOnHost()) return embedOnDevice(table, ids);
  const [vocab, width] = table.shape;
  return customOp([table], function embedForward() {
    const value = tf.tidy(() => tf.gather(table, tf.tensor1d(ids, "int32"))) as tf.Tensor2D;
    const gradFunc = (dy: tf.Tensor) => tf.tensor2d(embedBackward(data(dy), ids, vocab, width), [vocab, width]);
    return { value, gradFunc };
  });
}

/**
 * Scatter-adds rows of g into a [vocab, width] table. Hot loops live in top-level functions: inside
 * a gradient closure V8 optimised them several times worse (the attention's softmax backward ran ~6× slower).
 */
function embedBackward(g: Float32Array, ids: Int32Array, vocab: number, width: number): Float32Array {
  const out = new Float32Array(vocab * width);
  for (let n = 0; n < ids.length; n++) {
    const src = n * width;
    const dst = ids[n]! * width;
    for (let j = 0; j < width; j++) out[dst + j]! += g[src + j]!;
  }
  return out;
}

/**
 * xᵀ for a [rows, cols] tensor. On wasm and cpu the data is in host memory and a JS pass wins:
 * readback, transpose, upload took 0.6 ms for [2048, 128] against 3.9 ms in the wasm Transpose
 * kernel (2.5 against 7.4 ms at [2048, 384]); a device backend keeps its own op.
 */
export function transpose2d(x: tf.Tensor2D): tf.Tensor2D {
  if (!dataOnHost()) return tf.transpose(x);
  const [rows, cols] = x.shape;
  return tf.tensor2d(transposeRows(data(x), rows, cols), [cols, rows]);
}

/**
 * Transpose of a row-major [rows, cols] buffer, four source rows at a time: reads stream along
 * four rows and each output row takes four adjacent writes (1.5–2× faster than square tiles).
 */
export function transposeRows(src: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  let i = 0;
  for (; i + 4 <= rows; i += 4) {
    const a = i * cols;
    const b = a + cols;
    const c = b + cols;
    const d = c + cols;
    for (let j = 0; j < cols; j++) {
      const o = j * rows + i;
      out[o] = src[a + j]!;
      out[o + 1] = src[b + j]!;
      out[o + 2] = src[c + j]!;
      out[o + 3] = src[d + j]!;
    }
  }
  for (; i < rows; i++) for (let j = 0; j < cols; j++) out[j * rows + i] = src[i * cols + j]!;
  return out;
}

/** x·W with a gradient that transposes explicitly (matMul's transposeA/B is 10–20× slower on wasm). */
export function linear(x: tf.Tensor2D, w: tf.Tensor2D): tf.Tensor2D {
  return customOp([x, w], function linearForward(save) {
    save([x, w]);
    const value = tf.matMul(x, w) as tf.Tensor2D;
    const gradFunc = (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [xs, ws] = saved as [tf.Tensor2D, tf.Tensor2D];
      // Wᵀ stays a backend op: small, and a weight is never read back during a step.
      const dx = tf.tidy(() => tf.matMul(dy as tf.Tensor2D, tf.transpose(ws)));
      const dw = tf.tidy(() => tf.matMul(transpose2d(xs), dy as tf.Tensor2D));
      return [dx, dw];
    };
    return { value, gradFunc };
  });
}

/** y = x / rms(x) · g over rows of a [N, d] buffer, into `y` (plain arrays; the decoder reuses its `y`). */
export function rmsNormInto(
  x: Float32Array,
  g: Float32Array,
  rows: number,
  width: number,
  eps: number,
  y: Float32Array,
): void {
  for (let n = 0; n < rows; n++) {
    const o = n * width;
    let ss = 0;
    for (let j = 0; j < width; j++) ss += x[o + j]! * x[o + j]!;
    const r = 1 / Math.sqrt(ss / width + eps);
    for (let j = 0; j < width; j++) y[o + j] = x[o + j]! * r * g[j]!;
  }
}

/** rmsNormInto into a new array. */
export function rmsNormForward(
  x: Float32Array,
  g: Float32Array,
  rows: number,
  width: number,
  eps: number,
): Float32Array {
  const y = new Float32Array(rows * width);
  rmsNormInto(x, g, rows, width, eps, y);
  return y;
}

/** RMSNorm's gradients w.r.t. x [N, d] and the gain [d]. */
function rmsNormBackward(
  xd: Float32Array,
  gd: Float32Array,
  dyd: Float32Array,
  rows: number,
  width: number,
  eps: number,
): { dx: Float32Array; dg: Float32Array } {
  const dx = new Float32Array(rows * width);
  const dg = new Float64Array(width);
  for (let n = 0; n < rows; n++) {
    const o = n * width;
    let ss = 0;
    for (let j = 0; j < width; j++) ss += xd[o + j]! * xd[o + j]!;
    const r = 1 / Math.sqrt(ss / width + eps);
    // dx_i = r·(dŷ_i) − r³·x_i·Σ_j dŷ_j x_j / d, where dŷ = dy·g.
    let dot = 0;
    for (let j = 0; j < width; j++) {
      dot += dyd[o + j]! * gd[j]! * xd[o + j]!;
      dg[j]! += dyd[o + j]! * xd[o + j]! * r;
    }
    const k = (r * r * r * dot) / width;
    for (let j = 0; j < width; j++) dx[o + j] = r * dyd[o + j]! * gd[j]! - k * xd[o + j]!;
  }
  return { dx, dg: Float32Array.from(dg) };
}

/** RMSNorm with learned gain, [N, d] → [N, d]. */
export function rmsNorm(x: tf.Tensor2D, gain: tf.Tensor1D, eps: number): tf.Tensor2D {
  if (!dataOnHost()) return rmsNormOnDevice(x, gain, eps);
  const [rows, width] = x.shape;
  return customOp([x, gain], function rmsNormOpForward() {
    const xd = data(x);
    const gd = data(gain);
    const value = tf.tensor2d(rmsNormForward(xd, gd, rows, width, eps), [rows, width]);
    const gradFunc = (dy: tf.Tensor) => {
      const { dx, dg } = rmsNormBackward(xd, gd, data(dy), rows, width, eps);
      return [tf.tensor2d(dx, [rows, width]), tf.tensor1d(dg)];
    };
    return { value, gradFunc };
  });
}

/**
 * SwiGLU silu(gate)·up, [N, F] × [N, F] → [N, F], as same-shape wasm ops (XNNPACK's sigmoid is
 * ~10× faster than Math.exp in a JS loop). Gradient: d gate = g·up·s·(1 + gate·(1 − s)), d up = g·gate·s.
 */
export function swiglu(gate: tf.Tensor2D, up: tf.Tensor2D): tf.Tensor2D {
  return customOp([gate, up], function swigluOpForward(save) {
    save([gate, up]);
    const value = tf.tidy(() => tf.mul(tf.mul(gate, tf.sigmoid(gate)), up)) as tf.Tensor2D;
    const gradFunc = (dy: tf.Tensor2D, saved: tf.Tensor[]) => {
      const [a, b] = saved as [tf.Tensor2D, tf.Tensor2D];
      return tf.tidy(() => {
        const s = tf.sigmoid(a);
        const gs = tf.mul(dy, s);
        const one = tf.onesLike(a);
        return [tf.mul(tf.mul(gs, b), tf.add(one, tf.mul(a, tf.sub(one, s)))), tf.mul(gs, a)];
      });
    };
    return { value, gradFunc };
  });
}

/**
 * Query positions per block of the training attention. Block b's queries see keys [0, end of b)
 * only, so the fully masked part of the causal score matrix (above the diagonal blocks) is never
 * computed, forward or backward. Each block costs four more matMul calls (an XNNPACK operator and
 * a packed operand each), so the skipping pays with length: at 256 tokens (3/4 of the scores) it
 * measured even with one block, at 1024 (9/16) 1.26× faster; 64 was no better than 128.
 */
export const ATTENTION_BLOCK = 128;

/**
 * Additive causal masks for query positions [t0, t1) (rows (t, r): rep query heads per position)
 * over keys [0, t1), kept as backend tensors so a forward does not upload one per (sequence, kv
 * head, block). Bounded by size: one mask at the full context is already tens of MB.
 */
const causalMasks = new Map<string, tf.Tensor2D>();
const MASK_CACHE_FLOATS = 16 * 1024 * 1024;
let cachedMaskFloats = 0;
function causalMask(t0: number, t1: number, rep: number): tf.Tensor2D {
  const key = `${t0}:${t1}:${rep}`;
  let mask = causalMasks.get(key);
  if (!mask || mask.isDisposed) {
    const rows = (t1 - t0) * rep;
    const values = new Float32Array(rows * t1);
    for (let t = t0; t < t1; t++)
      for (let r = 0; r < rep; r++) {
        const o = ((t - t0) * rep + r) * t1;
        values.fill(-1e30, o + t + 1, o + t1);
      }
    cachedMaskFloats += values.length;
    if (cachedMaskFloats > MASK_CACHE_FLOATS) {
      for (const old of causalMasks.values()) old.dispose();
      causalMasks.clear();
      cachedMaskFloats = values.length;
    }
    // Created outside any tidy scope's reach: kept until evicted.
    mask = tf.keep(tf.tensor2d(values, [rows, t1]));
    causalMasks.set(key, mask);
  }
  return mask;
}

/** Result of the packed attention forward, kept in plain arrays for the backward pass. */
export interface AttentionForward {
  /** [N, heads·headDim] */
  readonly out: Float32Array;
  /** q|k|v after rotary, [N, qkvWidth]. */
  readonly roped: Float32Array;
  /** Per (sequence, kv head, query block): softmax probabilities [rows, block end] (only when kept for a gradient). */
  readonly probs: Float32Array[];
}

/** One (sequence, kv head) of the packed rows, gathered for 2-D matMuls. */
interface HeadGroup {
  /** Queries [L·rep, hd], rows (t, r): position-major, so a query block is a contiguous row range. */
  readonly q: Float32Array;
  /** Keys scaled by 1/√hd, [L, hd] (the scale on the keys leaves dQ unscaled and needs no pass over Q). */
  readonly ks: Float32Array;
  /** Values [L, hd]. */
  readonly v: Float32Array;
}

function gatherGroup(roped: Float32Array, offset: number, L: number, g: number, dims: Dims): HeadGroup {
  const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
  const qw = (heads / kvHeads) * hd;
  const scale = 1 / Math.sqrt(hd);
  const q = new Float32Array(L * qw);
  const ks = new Float32Array(L * hd);
  const v = new Float32Array(L * hd);
  const kCol = (heads + g) * hd;
  const vCol = (heads + kvHeads + g) * hd;
  for (let t = 0; t < L; t++) {
    const row = (offset + t) * C;
    // A group's query heads are adjacent columns, so its rows (t, ·) are one contiguous copy.
    q.set(roped.subarray(row + g * qw, row + (g + 1) * qw), t * qw);
    v.set(roped.subarray(row + vCol, row + vCol + hd), t * hd);
    for (let i = 0; i < hd; i++) ks[t * hd + i] = roped[row + kCol + i]! * scale;
  }
  return { q, ks, v };
}

/** Columns [0, cols) of the transpose of a row-major [rows, width] buffer: [width, cols]. */
function transposedPrefix(src: Float32Array, width: number, cols: number): Float32Array {
  const out = new Float32Array(width * cols);
  for (let t = 0; t < cols; t++) {
    const o = t * width;
    for (let i = 0; i < width; i++) out[i * cols + t] = src[o + i]!;
  }
  return out;
}

/**
 * Causal grouped-query attention over packed sequences (rows of sequence b are contiguous,
 * positions restart at 0). Per (sequence, kv head) the group's query heads are stacked so one
 * plain 2-D matMul serves them all, one query block (`block` positions) at a time against the
 * keys up to the block's end.
 */
export function attentionForward(
  qkv: Float32Array,
  seqLens: readonly number[],
  dims: Dims,
  rope: RotaryTable,
  keepProbs: boolean,
  block = ATTENTION_BLOCK,
): AttentionForward {
  const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
  const rep = heads / kvHeads;
  const qw = rep * hd;
  const rows = qkv.length / C;
  const roped = Float32Array.from(qkv);
  let offset = 0;
  for (const len of seqLens) {
    for (let t = 0; t < len; t++) rope.rotate(roped, (offset + t) * C, heads + kvHeads, t);
    offset += len;
  }
  const out = new Float32Array(rows * heads * hd);
  const probs: Float32Array[] = [];
  offset = 0;
  for (const L of seqLens) {
    for (let g = 0; g < kvHeads; g++) {
      const { q, ks, v } = gatherGroup(roped, offset, L, g, dims);
      for (let t0 = 0; t0 < L; t0 += block) {
        const t1 = Math.min(L, t0 + block);
        const n = (t1 - t0) * rep;
        const kst = transposedPrefix(ks, hd, t1);
        // Both matMuls have the small operand second (the side the wasm backend packs on every call).
        const [p, o] = tidyRead(() => {
          const qb = tf.tensor2d(q.subarray(t0 * qw, t1 * qw), [n, hd]);
          const scores = tf.add(tf.matMul(qb, tf.tensor2d(kst, [hd, t1])), causalMask(t0, t1, rep));
          const pt = tf.softmax(scores);
          return [keepProbs ? data(pt) : undefined, data(tf.matMul(pt, tf.tensor2d(v.subarray(0, t1 * hd), [t1, hd])))];
        });
        if (p) probs.push(p);
        scatterRows(o, out, heads * hd, offset + t0, offset + t1, g * qw, qw);
      }
    }
    offset += L;
  }
  return { out, roped, probs };
}

/** Packed causal GQA with rotary positions: fused q|k|v [N, qkvWidth] → [N, heads·headDim]. */
export function attention(
  qkv: tf.Tensor2D,
  seqLens: readonly number[],
  dims: Dims,
  rope: RotaryTable,
  block = ATTENTION_BLOCK,
): tf.Tensor2D {
  if (!dataOnHost()) return attentionOnDevice(qkv, seqLens, dims, rope);
  const rows = qkv.shape[0];
  return customOp([qkv], function attentionOpForward() {
    const fwd = attentionForward(data(qkv), seqLens, dims, rope, true, block);
    const value = tf.tensor2d(fwd.out, [rows, dims.heads * dims.headDim]);
    const gradFunc = (dy: tf.Tensor) =>
      tf.tensor2d(attentionBackward(fwd, data(dy), seqLens, dims, rope, block), [rows, dims.qkvWidth]);
    return { value, gradFunc };
  });
}

/** d q|k|v (before rotary is undone: the gradient w.r.t. the op's input) from dOut [N, heads·headDim]. */
function attentionBackward(
  fwd: AttentionForward,
  dOut: Float32Array,
  seqLens: readonly number[],
  dims: Dims,
  rope: RotaryTable,
  block: number,
): Float32Array {
  const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
  const rep = heads / kvHeads;
  const qw = rep * hd;
  const { roped, probs } = fwd;
  const dRoped = new Float32Array(roped.length);
  let offset = 0;
  let next = 0;
  for (const L of seqLens) {
    for (let g = 0; g < kvHeads; g++) {
      const group = gatherGroup(roped, offset, L, g, dims);
      const vt = transposedPrefix(group.v, hd, L);
      // dKsᵀ and dVᵀ [hd, L], summed over the query blocks.
      const dKst = new Float32Array(hd * L);
      const dVt = new Float32Array(hd * L);
      for (let t0 = 0; t0 < L; t0 += block) {
        const t1 = Math.min(L, t0 + block);
        const n = (t1 - t0) * rep;
        const p = probs[next++]!;
        const dO = gatherRows(dOut, heads * hd, offset + t0, offset + t1, g * qw, qw);
        const dOt = transposedPrefix(dO, hd, n);
        const qt = transposedPrefix(group.q.subarray(t0 * qw, t1 * qw), hd, n);
        const vtb = t1 === L ? vt : prefixColumns(vt, hd, L, t1);
        // dP = dO·Vᵀ; dVᵀ = dOᵀ·P. Pᵀ·dO would need Pᵀ: a transpose of the [n, t1] block costs
        // more than the backend's packing of P as the second operand.
        const [dP, dVtb] = tidyRead(() => [
          data(tf.matMul(tf.tensor2d(dO, [n, hd]), tf.tensor2d(vtb, [hd, t1]))),
          data(tf.matMul(tf.tensor2d(dOt, [hd, n]), tf.tensor2d(p, [n, t1]))),
        ]);
        softmaxBackward(p, dP, n, t1, t0, rep);
        // dQ = dS·Ks (the scale is on the keys); dKsᵀ = Qᵀ·dS.
        const [dQ, dKstb] = tidyRead(() => {
          const dS = tf.tensor2d(dP, [n, t1]);
          return [
            data(tf.matMul(dS, tf.tensor2d(group.ks.subarray(0, t1 * hd), [t1, hd]))),
            data(tf.matMul(tf.tensor2d(qt, [hd, n]), dS)),
          ];
        });
        scatterRows(dQ, dRoped, C, offset + t0, offset + t1, g * qw, qw);
        addColumns(dKst, L, dKstb, hd, t1);
        addColumns(dVt, L, dVtb, hd, t1);
      }
      scatterKv(dRoped, dKst, dVt, offset, L, g, dims);
    }
    for (let t = 0; t < L; t++) rope.unrotate(dRoped, (offset + t) * C, heads + kvHeads, t);
    offset += L;
  }
  return dRoped;
}

/** Columns [col, col + width) of rows [r0, r1) of a row-major buffer `stride` wide, packed: [r1 − r0, width]. */
function gatherRows(
  src: Float32Array,
  stride: number,
  r0: number,
  r1: number,
  col: number,
  width: number,
): Float32Array {
  const out = new Float32Array((r1 - r0) * width);
  for (let r = r0; r < r1; r++) out.set(src.subarray(r * stride + col, r * stride + col + width), (r - r0) * width);
  return out;
}

/** The inverse of gatherRows: packed [r1 − r0, width] rows into columns [col, col + width) of `dst`. */
function scatterRows(
  src: Float32Array,
  dst: Float32Array,
  stride: number,
  r0: number,
  r1: number,
  col: number,
  width: number,
): void {
  for (let r = r0; r < r1; r++) dst.set(src.subarray((r - r0) * width, (r - r0 + 1) * width), r * stride + col);
}

/** acc[:, :cols] += part, for row-major acc [rows, width] and part [rows, cols]. */
function addColumns(acc: Float32Array, width: number, part: Float32Array, rows: number, cols: number): void {
  for (let i = 0; i < rows; i++) {
    const o = i * width;
    const s = i * cols;
    for (let j = 0; j < cols; j++) acc[o + j]! += part[s + j]!;
  }
}

/** Writes dKsᵀ·scale and dVᵀ ([hd, L]) into group g's key and value columns of dRoped. */
function scatterKv(
  dRoped: Float32Array,
  dKst: Float32Array,
  dVt: Float32Array,
  offset: number,
  L: number,
  g: number,
  dims: Dims,
): void {
  const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
  const scale = 1 / Math.sqrt(hd);
  const kCol = (heads + g) * hd;
  const vCol = (heads + kvHeads + g) * hd;
  for (let t = 0; t < L; t++) {
    const row = (offset + t) * C;
    for (let i = 0; i < hd; i++) {
      dRoped[row + kCol + i] = dKst[i * L + t]! * scale;
      dRoped[row + vCol + i] = dVt[i * L + t]!;
    }
  }
}

/**
 * Softmax backward over a query block's rows, in place: dS = P ⊙ (dP − rowsum(dP ⊙ P)) replaces
 * dP [n, t1]. Row i is query position t0 + ⌊i/rep⌋, which sees keys up to itself; the rest is 0.
 * A function of its own so V8 optimises it apart from the long backward closure.
 */
function softmaxBackward(p: Float32Array, dP: Float32Array, n: number, t1: number, t0: number, rep: number): void {
  for (let i = 0; i < n; i++) {
    const o = i * t1;
    const seen = t0 + Math.floor(i / rep) + 1;
    let dot = 0;
    for (let j = 0; j < seen; j++) dot += dP[o + j]! * p[o + j]!;
    for (let j = 0; j < seen; j++) dP[o + j] = p[o + j]! * (dP[o + j]! - dot);
    dP.fill(0, o + seen, o + t1);
  }
}

/** Columns [0, cols) of a row-major [rows, width] buffer. */
function prefixColumns(src: Float32Array, rows: number, width: number, cols: number): Float32Array {
  const out = new Float32Array(rows * cols);
  for (let i = 0; i < rows; i++) out.set(src.subarray(i * width, i * width + cols), i * cols);
  return out;
}

/**
 * Per-token log-probs log_softmax(logits/temperature)[target], placed into a padded [B, T] grid:
 * cell c takes row `source[c]` of logits with target `targets[c]`; cells with source −1 are 0.
 * On wasm and cpu the logits live in host memory, so one JS pass (tokenLogProbsOnHost) is the
 * fast form; on a device backend (tfjs-node-gpu) that pass would copy [rows, vocab] logits and
 * their softmax to the host every micro-batch (2.5 GB for 2,048 tokens of a 151,936-token
 * vocabulary), so there the same values come from device ops (tokenLogProbsOnDevice).
 */
export function tokenLogProbs(
  logits: tf.Tensor2D,
  source: Int32Array,
  targets: Int32Array,
  shape: [number, number],
  temperature: number,
): tf.Tensor2D {
  return (dataOnHost() ? tokenLogProbsOnHost : tokenLogProbsOnDevice)(logits, source, targets, shape, temperature);
}

/**
 * tokenLogProbs in device ops, differentiated by TF.js: log-softmax over the vocabulary, then one
 * gather of the picked (row, target) entries from the flattened result (its gradient is a
 * scatter-add on the device); only [B, T] values ever leave the device.
 */
export function tokenLogProbsOnDevice(
  logits: tf.Tensor2D,
  source: Int32Array,
  targets: Int32Array,
  shape: [number, number],
  temperature: number,
): tf.Tensor2D {
  const [rows, vocab] = logits.shape;
  if (rows * vocab > 2 ** 31 - 1)
    throw new RangeError(
      `tokenLogProbs: ${rows} rows × ${vocab} vocabulary entries overflow int32 gather indices; lower trainer.microBatchTokens`,
    );
  const picked = new Int32Array(source.length);
  const valid = new Float32Array(source.length);
  for (let c = 0; c < source.length; c++) {
    if (source[c]! < 0) continue;
    picked[c] = source[c]! * vocab + targets[c]!;
    valid[c] = 1;
  }
  return tf.tidy(() => {
    const logp = tf.logSoftmax(tf.mul(logits, 1 / temperature)).reshape([rows * vocab]);
    const cells = tf.gather(logp, tf.tensor1d(picked, "int32"));
    return tf.mul(cells, tf.tensor1d(valid)).reshape(shape) as tf.Tensor2D;
  });
}

/**
 * tokenLogProbs on the host: the softmax rows come from the backend (its exp is SIMD; Math.exp in a
 * JS loop was most of this op's time), the picked log-probs and the gradient w·(onehot − p)/temperature
 * from one JS pass each.
 */
export function tokenLogProbsOnHost(
  logits: tf.Tensor2D,
  source: Int32Array,
  targets: Int32Array,
  shape: [number, number],
  temperature: number,
): tf.Tensor2D {
  const vocab = logits.shape[1];
  return customOp([logits], function logProbForward() {
    const l = data(logits);
    const invT = 1 / temperature;
    const probs = tidyRead(() => data(tf.softmax(invT === 1 ? logits : tf.mul(logits, invT))));
    const value = tf.tensor2d(pickedLogProbs(l, probs, source, targets, vocab, invT), shape);
    const gradFunc = (dy: tf.Tensor) =>
      tf.tensor2d(logProbsBackward(data(dy), probs, source, targets, vocab, invT), logits.shape);
    return { value, gradFunc };
  });
}

/**
 * log p[target] per cell from the logits row and its softmax p: with m the row's largest logit at
 * index a, log p_t = (l_t − m)/T + log p_a, and p_a ≥ 1/vocab, so no tiny probability is logged.
 */
function pickedLogProbs(
  l: Float32Array,
  probs: Float32Array,
  source: Int32Array,
  targets: Int32Array,
  vocab: number,
  invT: number,
): Float32Array {
  const out = new Float32Array(source.length);
  for (let c = 0; c < source.length; c++) {
    const row = source[c]!;
    if (row < 0) continue;
    const o = row * vocab;
    let best = 0;
    for (let j = 1; j < vocab; j++) if (l[o + j]! > l[o + best]!) best = j;
    out[c] = (l[o + targets[c]!]! - l[o + best]!) * invT + Math.log(probs[o + best]!);
  }
  return out;
}

/** d logits [rows, vocab]: w·(onehot − p)/T on each cell's row, with upstream weight w. */
function logProbsBackward(
  g: Float32Array,
  probs: Float32Array,
  source: Int32Array,
  targets: Int32Array,
  vocab: number,
  invT: number,
): Float32Array {
  const dl = new Float32Array(probs.length);
  for (let c = 0; c < source.length; c++) {
    const row = source[c]!;
    const w = g[c]!;
    if (row < 0 || w === 0) continue;
    const o = row * vocab;
    const k = w * invT;
    for (let j = 0; j < vocab; j++) dl[o + j]! -= k * probs[o + j]!;
    dl[o + targets[c]!]! += k;
  }
  return dl;
}

/** log_softmax(logits/temperature)[token] for one row of logits, as the server reports it. */
export function logProbOf(logits: Float32Array, token: number, temperature: number): number {
  const invT = 1 / temperature;
  let max = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < logits.length; j++) max = Math.max(max, logits[j]! * invT);
  let sum = 0;
  for (let j = 0; j < logits.length; j++) sum += Math.exp(logits[j]! * invT - max);
  return logits[token]! * invT - (max + Math.log(sum));
}
