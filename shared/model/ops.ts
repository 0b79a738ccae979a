import * as tf from "@tensorflow/tfjs";

/**
 * Fused transformer ops with hand-written gradients, shaped by what is fast on the wasm backend
 * (design.md "TF.js notes"): matMul only in its plain 2-D form (gradients transpose explicitly),
 * embedding lookup without tf.gather's missing gradient, no slice/split gradients (pads of the
 * whole input), no broadcasting; element-wise work (RMSNorm, SwiGLU, rotary, softmax-loss) runs as
 * plain loops over the tensor's data, which on wasm is a memcpy away.
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
    theta: number,
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
  const [vocab, width] = table.shape;
  return customOp([table], function embedForward() {
    const value = tf.tidy(() => tf.gather(table, tf.tensor1d(ids, "int32"))) as tf.Tensor2D;
    const gradFunc = function embedBackward(dy: tf.Tensor) {
      const g = data(dy);
      const out = new Float32Array(vocab * width);
      for (let n = 0; n < ids.length; n++) {
        const src = n * width;
        const dst = ids[n]! * width;
        for (let j = 0; j < width; j++) out[dst + j]! += g[src + j]!;
      }
      return tf.tensor2d(out, [vocab, width]);
    };
    return { value, gradFunc };
  });
}

/** x·W with a gradient that transposes explicitly (matMul's transposeA/B is 10–20× slower on wasm). */
export function linear(x: tf.Tensor2D, w: tf.Tensor2D): tf.Tensor2D {
  return customOp([x, w], function linearForward(save) {
    save([x, w]);
    const value = tf.matMul(x, w) as tf.Tensor2D;
    const gradFunc = (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [xs, ws] = saved as [tf.Tensor2D, tf.Tensor2D];
      const dx = tf.tidy(() => tf.matMul(dy as tf.Tensor2D, tf.transpose(ws)));
      const dw = tf.tidy(() => tf.matMul(tf.transpose(xs), dy as tf.Tensor2D));
      return [dx, dw];
    };
    return { value, gradFunc };
  });
}

/** y = x / rms(x) · g over rows of a [N, d] buffer (plain arrays; shared with the decoder). */
export function rmsNormForward(
  x: Float32Array,
  g: Float32Array,
  rows: number,
  width: number,
  eps: number,
): Float32Array {
  const y = new Float32Array(rows * width);
  for (let n = 0; n < rows; n++) {
    const o = n * width;
    let ss = 0;
    for (let j = 0; j < width; j++) ss += x[o + j]! * x[o + j]!;
    const r = 1 / Math.sqrt(ss / width + eps);
    for (let j = 0; j < width; j++) y[o + j] = x[o + j]! * r * g[j]!;
  }
  return y;
}

/** RMSNorm with learned gain, [N, d] → [N, d]. */
export function rmsNorm(x: tf.Tensor2D, gain: tf.Tensor1D, eps: number): tf.Tensor2D {
  const [rows, width] = x.shape;
  return customOp([x, gain], function rmsNormOpForward() {
    const xd = data(x);
    const gd = data(gain);
    const value = tf.tensor2d(rmsNormForward(xd, gd, rows, width, eps), [rows, width]);
    const gradFunc = function rmsNormBackward(dy: tf.Tensor) {
      const dyd = data(dy);
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
      return [tf.tensor2d(dx, [rows, width]), tf.tensor1d(Float32Array.from(dg))];
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
 * Additive causal masks [rep·L, L] (rows repeat per query head of a group) kept as backend tensors,
 * so a forward does not upload one per (sequence, kv head). Bounded by size: one mask at the full
 * context is already tens of MB.
 */
const causalMasks = new Map<number, tf.Tensor2D>();
const MASK_CACHE_FLOATS = 16 * 1024 * 1024;
let cachedMaskFloats = 0;
function causalMask(length: number, rep: number): tf.Tensor2D {
  const key = length * 1024 + rep;
  let mask = causalMasks.get(key);
  if (!mask || mask.isDisposed) {
    const values = new Float32Array(rep * length * length);
    for (let r = 0; r < rep; r++)
      for (let i = 0; i < length; i++)
        for (let j = i + 1; j < length; j++) values[(r * length + i) * length + j] = -1e30;
    cachedMaskFloats += values.length;
    if (cachedMaskFloats > MASK_CACHE_FLOATS) {
      for (const old of causalMasks.values()) old.dispose();
      causalMasks.clear();
      cachedMaskFloats = values.length;
    }
    // Created outside any tidy scope's reach: kept until evicted.
    mask = tf.keep(tf.tensor2d(values, [rep * length, length]));
    causalMasks.set(key, mask);
  }
  return mask;
}

/** Result of the packed attention forward, kept in plain arrays for the backward pass and the KV cache. */
export interface AttentionForward {
  /** [N, heads·headDim] */
  readonly out: Float32Array;
  /** q|k|v after rotary, [N, qkvWidth] (k and v rows are what a KV cache stores). */
  readonly roped: Float32Array;
  /** Per (sequence, kv head): softmax probabilities [rep·L, L] (only when kept for a gradient). */
  readonly probs: Float32Array[];
}

/**
 * Causal grouped-query attention over packed sequences (rows of sequence b are contiguous,
 * positions restart at 0). Per (sequence, kv head) the group's query heads are stacked so one
 * plain 2-D matMul serves them all.
 */
export function attentionForward(
  qkv: Float32Array,
  seqLens: readonly number[],
  dims: Dims,
  rope: RotaryTable,
  keepProbs: boolean,
): AttentionForward {
  const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
  const rep = heads / kvHeads;
  const rows = qkv.length / C;
  const roped = Float32Array.from(qkv);
  let offset = 0;
  for (const len of seqLens) {
    for (let t = 0; t < len; t++) rope.rotate(roped, (offset + t) * C, heads + kvHeads, t);
    offset += len;
  }
  const out = new Float32Array(rows * heads * hd);
  const probs: Float32Array[] = [];
  const scale = 1 / Math.sqrt(hd);
  offset = 0;
  for (const L of seqLens) {
    for (let g = 0; g < kvHeads; g++) {
      const q = new Float32Array(rep * L * hd);
      const kt = new Float32Array(hd * L);
      const v = new Float32Array(L * hd);
      const kCol = (heads + g) * hd;
      const vCol = (heads + kvHeads + g) * hd;
      for (let t = 0; t < L; t++) {
        const row = (offset + t) * C;
        for (let r = 0; r < rep; r++) {
          const qCol = (g * rep + r) * hd;
          for (let i = 0; i < hd; i++) q[(r * L + t) * hd + i] = roped[row + qCol + i]! * scale;
        }
        for (let i = 0; i < hd; i++) {
          kt[i * L + t] = roped[row + kCol + i]!;
          v[t * hd + i] = roped[row + vCol + i]!;
        }
      }
      // Both matMuls have the small operand second (the side the wasm backend packs on every call).
      const mask = causalMask(L, rep);
      const [p, o] = tidyRead(() => {
        const scores = tf.add(tf.matMul(tf.tensor2d(q, [rep * L, hd]), tf.tensor2d(kt, [hd, L])), mask);
        const pt = tf.softmax(scores);
        return [keepProbs ? data(pt) : undefined, data(tf.matMul(pt, tf.tensor2d(v, [L, hd])))];
      });
      if (p) probs.push(p);
      for (let r = 0; r < rep; r++) {
        const col = (g * rep + r) * hd;
        for (let t = 0; t < L; t++) {
          const dst = (offset + t) * heads * hd + col;
          const src = (r * L + t) * hd;
          for (let i = 0; i < hd; i++) out[dst + i] = o[src + i]!;
        }
      }
    }
    offset += L;
  }
  return { out, roped, probs };
}

/** Packed causal GQA with rotary positions: fused q|k|v [N, qkvWidth] → [N, heads·headDim]. */
export function attention(qkv: tf.Tensor2D, seqLens: readonly number[], dims: Dims, rope: RotaryTable): tf.Tensor2D {
  const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
  const rep = heads / kvHeads;
  const rows = qkv.shape[0];
  return customOp([qkv], function attentionOpForward() {
    const fwd = attentionForward(data(qkv), seqLens, dims, rope, true);
    const value = tf.tensor2d(fwd.out, [rows, heads * hd]);
    const gradFunc = function attentionBackward(dy: tf.Tensor) {
      const dOut = data(dy);
      const { roped, probs } = fwd;
      const dRoped = new Float32Array(rows * C);
      const scale = 1 / Math.sqrt(hd);
      let offset = 0;
      let block = 0;
      for (const L of seqLens) {
        for (let g = 0; g < kvHeads; g++) {
          const p = probs[block++]!;
          const R = rep * L;
          // Every matMul keeps its large [R, L] or [L, R] operand first: the wasm backend packs the
          // second operand on every call (its operator cache is keyed by it), which made
          // dVᵀ = dOᵀ·P and dKᵀ = Qsᵀ·dS ~3× slower than dV = Pᵀ·dO and dK = dSᵀ·Qs.
          const qs = new Float32Array(R * hd);
          const k = new Float32Array(L * hd);
          const vt = new Float32Array(hd * L);
          const dO = new Float32Array(R * hd);
          const kCol = (heads + g) * hd;
          const vCol = (heads + kvHeads + g) * hd;
          for (let t = 0; t < L; t++) {
            const row = (offset + t) * C;
            for (let r = 0; r < rep; r++) {
              const qCol = (g * rep + r) * hd;
              const rt = r * L + t;
              for (let i = 0; i < hd; i++) {
                qs[rt * hd + i] = roped[row + qCol + i]! * scale;
                dO[rt * hd + i] = dOut[(offset + t) * heads * hd + qCol + i]!;
              }
            }
            for (let i = 0; i < hd; i++) {
              k[t * hd + i] = roped[row + kCol + i]!;
              vt[i * L + t] = roped[row + vCol + i]!;
            }
          }
          // dV = Pᵀ·dO and dP = dO·Vᵀ (both sum over the group's heads through the stacked rows);
          // the [L, R] transposes run in the backend (strided writes in JS cost more).
          const [dV, dP] = tidyRead(() => [
            data(tf.matMul(tf.transpose(tf.tensor2d(p, [R, L])), tf.tensor2d(dO, [R, hd]))),
            data(tf.matMul(tf.tensor2d(dO, [R, hd]), tf.tensor2d(vt, [hd, L]))),
          ]);
          // Softmax backward: dS = P ⊙ (dP − rowsum(dP ⊙ P)), zero above the diagonal (dP is
          // overwritten with dS).
          for (let i = 0; i < R; i++) {
            const o = i * L;
            const seen = (i % L) + 1;
            let dot = 0;
            for (let j = 0; j < seen; j++) dot += dP[o + j]! * p[o + j]!;
            for (let j = 0; j < seen; j++) dP[o + j] = p[o + j]! * (dP[o + j]! - dot);
            dP.fill(0, o + seen, o + L);
          }
          const [dQs, dK] = tidyRead(() => {
            const dS = tf.tensor2d(dP, [R, L]);
            return [
              data(tf.matMul(dS, tf.tensor2d(k, [L, hd]))),
              data(tf.matMul(tf.transpose(dS), tf.tensor2d(qs, [R, hd]))),
            ];
          });
          for (let t = 0; t < L; t++) {
            const row = (offset + t) * C;
            for (let r = 0; r < rep; r++) {
              const qCol = (g * rep + r) * hd;
              for (let i = 0; i < hd; i++) dRoped[row + qCol + i] = dQs[(r * L + t) * hd + i]! * scale;
            }
            for (let i = 0; i < hd; i++) {
              dRoped[row + kCol + i] = dK[t * hd + i]!;
              dRoped[row + vCol + i] = dV[t * hd + i]!;
            }
          }
        }
        for (let t = 0; t < L; t++) rope.unrotate(dRoped, (offset + t) * C, heads + kvHeads, t);
        offset += L;
      }
      return tf.tensor2d(dRoped, [rows, C]);
    };
    return { value, gradFunc };
  });
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
  const onHost = tf.getBackend() === "wasm" || tf.getBackend() === "cpu";
  return (onHost ? tokenLogProbsOnHost : tokenLogProbsOnDevice)(logits, source, targets, shape, temperature);
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

/** tokenLogProbs as one host pass; the gradient is w·(onehot − p)/temperature, in one pass too. */
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
    const out = new Float32Array(source.length);
    // Softmax rows per cell, kept for the backward pass (cells without a source stay unused).
    const probs = new Float32Array(source.length * vocab);
    const invT = 1 / temperature;
    for (let c = 0; c < source.length; c++) {
      const row = source[c]!;
      if (row < 0) continue;
      const o = row * vocab;
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < vocab; j++) max = Math.max(max, l[o + j]! * invT);
      let sum = 0;
      for (let j = 0; j < vocab; j++) {
        const e = Math.exp(l[o + j]! * invT - max);
        probs[c * vocab + j] = e;
        sum += e;
      }
      const inv = 1 / sum;
      for (let j = 0; j < vocab; j++) probs[c * vocab + j]! *= inv;
      out[c] = l[o + targets[c]!]! * invT - (max + Math.log(sum));
    }
    const value = tf.tensor2d(out, shape);
    const gradFunc = function logProbBackward(dy: tf.Tensor) {
      const g = data(dy);
      const dl = new Float32Array(l.length);
      for (let c = 0; c < source.length; c++) {
        const row = source[c]!;
        const w = g[c]!;
        if (row < 0 || w === 0) continue;
        const o = row * vocab;
        const k = w * invT;
        for (let j = 0; j < vocab; j++) dl[o + j]! -= k * probs[c * vocab + j]!;
        dl[o + targets[c]!]! += k;
      }
      return tf.tensor2d(dl, logits.shape);
    };
    return { value, gradFunc };
  });
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
