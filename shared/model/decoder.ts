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
  rowsAllocated: number;
  keys: Float32Array[];
  values: Float32Array[];
}

/**
 * Attention of one new token (its rotated q|k|v row at buf[base..]) over `positions` cached rows,
 * written to out[outBase..]. Heads of a kv group are scored together so each key row is read once.
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
  scores: Float64Array,
  acc: Float64Array,
): void {
  const rep = heads / kvHeads;
  const kvWidth = kvHeads * hd;
  const scale = 1 / Math.sqrt(hd);
  for (let g = 0; g < kvHeads; g++) {
    const kOff = g * hd;
    for (let r = 0; r < rep; r++) {
      const q = base + (g * rep + r) * hd;
      const row = r * positions;
      let max = Number.NEGATIVE_INFINITY;
      for (let j = 0; j < positions; j++) {
        const k = j * kvWidth + kOff;
        // Four independent sums: a single running sum is bound by floating-point add latency.
        let d0 = 0;
        let d1 = 0;
        let d2 = 0;
        let d3 = 0;
        let e = 0;
        for (; e + 3 < hd; e += 4) {
          d0 += buf[q + e]! * keys[k + e]!;
          d1 += buf[q + e + 1]! * keys[k + e + 1]!;
          d2 += buf[q + e + 2]! * keys[k + e + 2]!;
          d3 += buf[q + e + 3]! * keys[k + e + 3]!;
        }
        for (; e < hd; e++) d0 += buf[q + e]! * keys[k + e]!;
        const s = (d0 + d1 + (d2 + d3)) * scale;
        scores[row + j] = s;
        if (s > max) max = s;
      }
      let sum = 0;
      for (let j = 0; j < positions; j++) {
        const e = Math.exp(scores[row + j]! - max);
        scores[row + j] = e;
        sum += e;
      }
      acc.fill(0);
      for (let j = 0; j < positions; j++) {
        const p = scores[row + j]! / sum;
        const v = j * kvWidth + kOff;
        for (let e = 0; e < hd; e++) acc[e]! += p * values[v + e]!;
      }
      const o = outBase + (g * rep + r) * hd;
      for (let e = 0; e < hd; e++) out[o + e] = acc[e]!;
    }
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
    const policy = this.policy;
    policy.validateTokens(prompt, "prompt");
    const slot = this.slots.indexOf(undefined);
    if (slot < 0) throw new DecoderError(`no free slot: all ${this.capacity} are in use`);
    const { dims, rope, config } = policy;
    const L = prompt.length;
    const state: SlotState = {
      length: 0,
      rowsAllocated: 0,
      keys: Array.from({ length: config.layers }, () => new Float32Array(0)),
      values: Array.from({ length: config.layers }, () => new Float32Array(0)),
    };
    this.ensureRows(state, L);
    const kvWidth = dims.kvHeads * dims.headDim;
    const kCol = dims.heads * dims.headDim;
    const vCol = kCol + kvWidth;
    const logits = tidyRead(() => {
      const hidden = policy.hidden(Int32Array.from(prompt), (layer, qkv) => {
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
    this.slots[slot] = state;
    this.activeCount += 1;
    return { slot, logits };
  }

  step(slots: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (slots.length !== tokens.length)
      throw new DecoderError(`step: ${slots.length} slots but ${tokens.length} tokens (one token per slot)`);
    if (slots.length === 0) return [];
    const policy = this.policy;
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
    const rep = heads / kvHeads;
    const kvWidth = kvHeads * hd;
    const n = slots.length;
    const logits = tidyRead(() => {
      const hidden = policy.hidden(Int32Array.from(tokens), (layer, qkv) => {
        const buf = qkv.dataSync() as Float32Array;
        const out = new Float32Array(n * heads * hd);
        let scores = new Float64Array(256);
        const acc = new Float64Array(hd);
        for (let i = 0; i < n; i++) {
          const state = states[i]!;
          const pos = state.length;
          const base = i * C;
          rope.rotate(buf, base, heads + kvHeads, pos);
          const keys = state.keys[layer]!;
          const values = state.values[layer]!;
          keys.set(buf.subarray(base + heads * hd, base + heads * hd + kvWidth), pos * kvWidth);
          values.set(buf.subarray(base + heads * hd + kvWidth, base + C), pos * kvWidth);
          if (scores.length < rep * (pos + 1)) scores = new Float64Array(rep * (pos + 1) * 2);
          attendOne(buf, base, keys, values, pos + 1, heads, kvHeads, hd, out, i * heads * hd, scores, acc);
        }
        return tf.tensor2d(out, [n, heads * hd]);
      });
      return policy.head(hidden).dataSync() as Float32Array;
    });
    for (const state of states) state.length += 1;
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
    const a = this.policy.config;
    const b = policy.config;
    for (const key of Object.keys(a) as Array<keyof typeof a>) {
      if (a[key] !== b[key])
        throw new DecoderError(`setPolicy: config.${key} differs (${a[key]} → ${b[key]}); the KV cache would not fit`);
    }
    this.policy = policy;
  }

  dispose(): void {
    this.slots.fill(undefined);
    this.activeCount = 0;
  }
}
