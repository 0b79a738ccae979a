import * as tf from "@tensorflow/tfjs";
import { AgentRlError } from "../errors.ts";
import { attentionForward, tidyRead } from "./ops.ts";
import type { TransformerPolicy } from "./transformer.ts";
import type { Decoder, InferencePolicy } from "./types.ts";

/** Raised for decoder misuse: no free slot, unknown slot, a sequence at the context limit. */
export class DecoderError extends AgentRlError {
  override readonly name = "DecoderError";
}

/** One sequence's KV cache: per layer, rows [position, kvHeads·headDim] of rotated keys and of values. */
interface SlotState {
  length: number;
  /** The token ids the cache holds (prompt plus consumed tokens), to recompute it for new weights. */
  readonly ids: number[];
  rowsAllocated: number;
  keys: Float32Array[];
  values: Float32Array[];
}

/** Scratch buffers reused across decode steps. */
interface Scratch {
  scores: Float64Array;
  acc: Float64Array;
}

/**
 * Attention of one new token (its rotated q|k|v row at buf[base..]) over `positions` cached rows,
 * written to out[outBase..].
 */
function attendOne(
  buf: Float32Array,
  base: number,
  keys: Float32Array,
  values: Float32Array,
  positions: number,
  heads: number,
  kvHeads: number,
  hd: number,
  out: Float32Array,
  outBase: number,
  scratch: Scratch,
): void {
  const rep = heads / kvHeads;
  if (rep === 2) {
    attendPair(buf, base, keys, values, positions, kvHeads, hd, out, outBase, scratch);
    return;
  }
  const { scores, acc } = scratch;
  const kvWidth = kvHeads * hd;
  const scale = 1 / Math.sqrt(hd);
  for (let g = 0; g < kvHeads; g++) {
    const kOff = g * hd;
    for (let r = 0; r < rep; r++) {
      const q = base + (g * rep + r) * hd;
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < positions; j++) {
        const k = j * kvWidth + kOff;
        let dot = 0;
        for (let e = 0; e < hd; e++) dot += buf[q + e]! * keys[k + e]!;
        const s = dot * scale;
        scores[j] = s;
        if (s > max) max = s;
      }
      let sum = 0;
      for (let j = 0; j < positions; j++) {
        const e = Math.exp(scores[j]! - max);
        scores[j] = e;
        sum += e;
      }
      acc.fill(0, 0, hd);
      for (let j = 0; j < positions; j++) {
        const p = scores[j]! / sum;
        const v = j * kvWidth + kOff;
        for (let e = 0; e < hd; e++) acc[e]! += p * values[v + e]!;
      }
      const o = outBase + (g * rep + r) * hd;
      for (let e = 0; e < hd; e++) out[o + e] = acc[e]!;
    }
  }
}

/**
 * The two-query-heads-per-kv-head case (the default config): both heads are scored in one pass
 * over the cache, so each key and value element is loaded once for two multiply-adds (~1.4× faster).
 */
function attendPair(
  buf: Float32Array,
  base: number,
  keys: Float32Array,
  values: Float32Array,
  positions: number,
  kvHeads: number,
  hd: number,
  out: Float32Array,
  outBase: number,
  scratch: Scratch,
): void {
  const { scores, acc } = scratch;
  const kvWidth = kvHeads * hd;
  const scale = 1 / Math.sqrt(hd);
  // acc layout: [q0 | q1 | out0 | out1], each hd long.
  for (let g = 0; g < kvHeads; g++) {
    const kOff = g * hd;
    const q = base + 2 * g * hd;
    for (let e = 0; e < 2 * hd; e++) acc[e] = buf[q + e]! * scale;
    let max0 = Number.NEGATIVE_INFINITY;
    let max1 = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < positions; j++) {
      const k = j * kvWidth + kOff;
      let a = 0;
      let b = 0;
      for (let e = 0; e < hd; e++) {
        const kv = keys[k + e]!;
        a += acc[e]! * kv;
        b += acc[hd + e]! * kv;
      }
      scores[j] = a;
      scores[positions + j] = b;
      if (a > max0) max0 = a;
      if (b > max1) max1 = b;
    }
    let sum0 = 0;
    let sum1 = 0;
    for (let j = 0; j < positions; j++) {
      const a = Math.exp(scores[j]! - max0);
      scores[j] = a;
      sum0 += a;
      const b = Math.exp(scores[positions + j]! - max1);
      scores[positions + j] = b;
      sum1 += b;
    }
    acc.fill(0, 2 * hd, 4 * hd);
    for (let j = 0; j < positions; j++) {
      const p0 = scores[j]! / sum0;
      const p1 = scores[positions + j]! / sum1;
      const v = j * kvWidth + kOff;
      for (let e = 0; e < hd; e++) {
        const vv = values[v + e]!;
        acc[2 * hd + e]! += p0 * vv;
        acc[3 * hd + e]! += p1 * vv;
      }
    }
    const o = outBase + 2 * g * hd;
    for (let e = 0; e < 2 * hd; e++) out[o + e] = acc[2 * hd + e]!;
  }
}

function isTransformer(policy: InferencePolicy): policy is TransformerPolicy {
  return typeof (policy as Partial<TransformerPolicy>).hidden === "function";
}

/**
 * Continuous-batching decoder over a TransformerPolicy. The dense work (projections, MLP, head)
 * of all stepped slots runs as one batched matMul per weight; attention against each slot's own
 * cache runs in plain loops (per-slot lengths differ, and wasm has no fast batched 3-D matMul).
 * Prefill uses the training path's attention, so prompt and generated tokens see the same math.
 */
export class KvDecoder implements Decoder {
  private policy: TransformerPolicy;
  private readonly slots: Array<SlotState | undefined>;
  private activeCount = 0;

  constructor(
    policy: TransformerPolicy,
    readonly capacity: number,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new DecoderError(`capacity: ${capacity} is not allowed (must be an integer ≥ 1)`);
    this.policy = policy;
    this.slots = new Array(capacity).fill(undefined);
  }

  get policyVersion(): number {
    return this.policy.version;
  }

  get active(): number {
    return this.activeCount;
  }

  /** Positions already in the slot's cache (prompt plus consumed tokens). */
  length(slot: number): number {
    return this.slotState(slot).length;
  }

  /** The current policy, refusing one disposed while this decoder still uses it (a caller bug worth naming). */
  private livePolicy(): TransformerPolicy {
    if (this.policy.isDisposed)
      throw new DecoderError(`policy version ${this.policy.version} was disposed while this decoder still uses it`);
    return this.policy;
  }

  private slotState(slot: number): SlotState {
    const state = Number.isInteger(slot) ? this.slots[slot] : undefined;
    if (!state) throw new DecoderError(`slot ${slot} is not in use (capacity ${this.capacity})`);
    return state;
  }

  private ensureRows(state: SlotState, rows: number): void {
    if (rows <= state.rowsAllocated) return;
    const width = this.policy.dims.kvHeads * this.policy.dims.headDim;
    const next = Math.min(this.policy.config.contextLength, Math.max(rows, state.rowsAllocated * 2, 64));
    const grow = (old: Float32Array) => {
      const fresh = new Float32Array(next * width);
      fresh.set(old.subarray(0, state.length * width));
      return fresh;
    };
    state.keys = state.keys.map(grow);
    state.values = state.values.map(grow);
    state.rowsAllocated = next;
  }

  add(prompt: readonly number[]): { slot: number; logits: Float32Array } {
    const policy = this.livePolicy();
    policy.validateTokens(prompt, "prompt");
    const slot = this.slots.indexOf(undefined);
    if (slot < 0) throw new DecoderError(`no free slot: all ${this.capacity} are in use`);
    const state: SlotState = {
      length: 0,
      ids: [...prompt],
      rowsAllocated: 0,
      keys: Array.from({ length: policy.config.layers }, () => new Float32Array(0)),
      values: Array.from({ length: policy.config.layers }, () => new Float32Array(0)),
    };
    const logits = this.prefill(policy, state);
    this.slots[slot] = state;
    this.activeCount += 1;
    return { slot, logits };
  }

  /** Fills the slot's cache from its ids with `policy`'s weights; returns the next-token logits. */
  private prefill(policy: TransformerPolicy, state: SlotState): Float32Array {
    const { dims, rope } = policy;
    const L = state.ids.length;
    this.ensureRows(state, L);
    const kvWidth = dims.kvHeads * dims.headDim;
    const kCol = dims.heads * dims.headDim;
    const vCol = kCol + kvWidth;
    const logits = tidyRead(() => {
      const hidden = policy.hidden(Int32Array.from(state.ids), (layer, qkv) => {
        const fwd = attentionForward(qkv.dataSync() as Float32Array, [L], dims, rope, false);
        const keys = state.keys[layer]!;
        const values = state.values[layer]!;
        for (let t = 0; t < L; t++) {
          const row = t * dims.qkvWidth;
          keys.set(fwd.roped.subarray(row + kCol, row + kCol + kvWidth), t * kvWidth);
          values.set(fwd.roped.subarray(row + vCol, row + vCol + kvWidth), t * kvWidth);
        }
        return tf.tensor2d(fwd.out, [L, dims.heads * dims.headDim]);
      });
      const last = L === 1 ? hidden : tf.slice(hidden, [L - 1, 0], [1, dims.dModel]);
      return policy.head(last).dataSync() as Float32Array;
    });
    state.length = L;
    return logits;
  }

  step(slots: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (slots.length !== tokens.length)
      throw new DecoderError(`step: ${slots.length} slots but ${tokens.length} tokens (one token per slot)`);
    if (slots.length === 0) return [];
    const policy = this.livePolicy();
    const { dims, rope, config } = policy;
    const seen = new Set<number>();
    const states = slots.map((slot, i) => {
      if (seen.has(slot)) throw new DecoderError(`step: slot ${slot} appears twice`);
      seen.add(slot);
      const state = this.slotState(slot);
      if (state.length >= config.contextLength)
        throw new DecoderError(`step: slot ${slot} is full (context length ${config.contextLength})`);
      const t = tokens[i]!;
      if (!Number.isInteger(t) || t < 0 || t >= config.vocabSize)
        throw new DecoderError(`step: tokens[${i}] = ${t} is outside the vocabulary 0..${config.vocabSize - 1}`);
      this.ensureRows(state, state.length + 1);
      return state;
    });
    const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
    const kvWidth = kvHeads * hd;
    const n = slots.length;
    const logits = tidyRead(() => {
      const hidden = policy.hidden(Int32Array.from(tokens), (layer, qkv) => {
        const buf = qkv.dataSync() as Float32Array;
        const out = new Float32Array(n * heads * hd);
        const scratch: Scratch = { scores: new Float64Array(512), acc: new Float64Array(4 * hd) };
        for (let i = 0; i < n; i++) {
          const state = states[i]!;
          const pos = state.length;
          const base = i * C;
          rope.rotate(buf, base, heads + kvHeads, pos);
          const keys = state.keys[layer]!;
          const values = state.values[layer]!;
          keys.set(buf.subarray(base + heads * hd, base + heads * hd + kvWidth), pos * kvWidth);
          values.set(buf.subarray(base + heads * hd + kvWidth, base + C), pos * kvWidth);
          if (scratch.scores.length < 2 * (pos + 1)) scratch.scores = new Float64Array(4 * (pos + 1));
          attendOne(buf, base, keys, values, pos + 1, heads, kvHeads, hd, out, i * heads * hd, scratch);
        }
        return tf.tensor2d(out, [n, heads * hd]);
      });
      return policy.head(hidden).dataSync() as Float32Array;
    });
    states.forEach((state, i) => {
      state.length += 1;
      state.ids.push(tokens[i] as number);
    });
    const V = config.vocabSize;
    return states.map((_, i) => logits.slice(i * V, (i + 1) * V));
  }

  remove(slot: number): void {
    this.slotState(slot);
    this.slots[slot] = undefined;
    this.activeCount -= 1;
  }

  setPolicy(policy: InferencePolicy): void {
    if (!isTransformer(policy)) throw new DecoderError("setPolicy: expected a policy created by shared/model");
    if (policy.isDisposed) throw new DecoderError(`setPolicy: policy version ${policy.version} is disposed`);
    const a = this.policy.config;
    const b = policy.config;
    for (const key of Object.keys(a) as Array<keyof typeof a>) {
      if (a[key] !== b[key])
        throw new DecoderError(`setPolicy: config.${key} differs (${a[key]} → ${b[key]}); the KV cache would not fit`);
    }
    this.policy = policy;
    // No token may belong to two policies: a cache computed by the old weights would make every
    // later token's distribution a mix of both, matching neither version's log-prob. So each
    // running sequence's cache is recomputed from its ids with the new weights (one prefill per
    // sequence, as AReaL's interruptible generation does), and tokens sampled from here on are
    // exactly the new version's. Finishing on the old weights instead would hold two policies in
    // memory and keep serving a version the trainer has moved past.
    for (const state of this.slots) if (state) this.prefill(policy, state);
  }

  dispose(): void {
    this.slots.fill(undefined);
    this.activeCount = 0;
  }
}
