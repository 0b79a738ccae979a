import type * as tf from "@tensorflow/tfjs";
import { AgentRlError } from "../errors.ts";
import { DecodeWeights, hostMatMul } from "./decodeWeights.ts";
import { KernelMemory } from "./kernel.ts";
import { type Dims, rmsNormInto } from "./ops.ts";
import { drawToken } from "./sampling.ts";
import type { TransformerPolicy } from "./transformer.ts";
import type { Decoder, DrawnToken, InferencePolicy, TokenDraw } from "./types.ts";

/** Raised for decoder misuse: no free slot, unknown slot, a sequence at the context limit. */
export class DecoderError extends AgentRlError {
  override readonly name = "DecoderError";
}

/** One draw per slot, or a DecoderError. */
export function checkDraws(slots: readonly number[], draws: readonly TokenDraw[]): void {
  if (draws.length !== slots.length)
    throw new DecoderError(`stepAndDraw: ${slots.length} slots but ${draws.length} draws (one draw per slot)`);
}

/** One sequence's KV cache: per layer, blocks of rows [position, kvHeads·headDim] in kernel memory. */
interface SlotState {
  length: number;
  /** The token ids the cache holds (prompt plus consumed tokens), to recompute it for new weights. */
  readonly ids: number[];
  rowsAllocated: number;
  /** Per layer, byte offsets of the rotated keys and of the values in the decoder's KernelMemory. */
  keys: number[];
  values: number[];
}

/** Rows of one forward pass through the decoder: row i is position `positions[i]` of `states[i]`. */
interface RowBatch {
  readonly states: readonly SlotState[];
  readonly positions: readonly number[];
}

/** Counters of the prefix (KV) cache across turns. */
export interface PrefixCacheStats {
  /** Prompts that continued a retired sequence's ids exactly and reused its cache. */
  hits: number;
  /** Prompt tokens not recomputed thanks to those hits. */
  reusedTokens: number;
  /** Prompt tokens prefilled (computed). */
  prefilledTokens: number;
}

/** Host rows a pass works in, reused across steps (grown for a longer prefill). */
class PassBuffers {
  readonly rows: number;
  /** Residual stream [rows, d]. */
  readonly x: Float32Array;
  /** Normed rows [rows, d]. */
  readonly h: Float32Array;
  /** q|k|v rows [rows, qkvWidth]. */
  readonly qkv: Float32Array;
  /** Attention output [rows, heads·hd]. */
  readonly attn: Float32Array;
  /** silu(gate)·up [rows, ffnHidden]. */
  readonly ffn: Float32Array;
  constructor(rows: number, dims: Dims) {
    this.rows = rows;
    this.x = new Float32Array(rows * dims.dModel);
    this.h = new Float32Array(rows * dims.dModel);
    this.qkv = new Float32Array(rows * dims.qkvWidth);
    this.attn = new Float32Array(rows * dims.heads * dims.headDim);
    this.ffn = new Float32Array(rows * dims.ffnHidden);
  }
}

function isTransformer(policy: InferencePolicy): policy is TransformerPolicy {
  return typeof (policy as Partial<TransformerPolicy>).hidden === "function";
}

/** Options of a KvDecoder. */
export interface KvDecoderOptions {
  /**
   * Retired sequences whose caches are kept for a next turn that extends them exactly.
   * @default capacity
   */
  prefixCacheEntries?: number;
  /** Use the plain-JS kernels instead of wasm SIMD (tests compare the two). @default false */
  noSimd?: boolean;
}

/**
 * Continuous-batching decoder over a TransformerPolicy. The dense work (projections, MLP, head)
 * of all rows in a pass runs as one batched matMul per weight; attention of every row against its
 * own sequence's cache runs in one pass over all rows through a wasm SIMD kernel (kernel.ts), the
 * caches living in that kernel's memory. Prefill, prefix extension and decode steps all go through
 * the same row pass, so prompt and generated tokens see the same math.
 *
 * Prefix cache: a removed sequence's cache is kept (up to `prefixCacheEntries`, least recently
 * retired dropped first); a prompt whose ids start with all of a kept sequence's ids (the next turn
 * of a conversation: previous prompt + output + new messages) takes that cache over and only
 * prefills the rest. Changing weights empties it.
 */
export class KvDecoder implements Decoder {
  private policy: TransformerPolicy;
  private readonly slots: Array<SlotState | undefined>;
  private activeCount = 0;
  private readonly memory: KernelMemory;
  /** Kernel scratch: queries [heads·hd], scores [contextLength], outputs [heads·hd]. */
  private readonly scratch: { q: number; scores: number; out: number };
  private readonly retired: SlotState[] = [];
  private readonly prefixCacheEntries: number;
  private weights: DecodeWeights | undefined;
  private buffers: PassBuffers | undefined;
  /** Kernel-memory rows for SwiGLU: gate|up products [rows, 2F] and silu(gate)·up [rows, F]. */
  private ffnScratch: { rows: number; gu: number; out: number } | undefined;
  readonly prefixStats: PrefixCacheStats = { hits: 0, reusedTokens: 0, prefilledTokens: 0 };

  constructor(
    policy: TransformerPolicy,
    readonly capacity: number,
    options: KvDecoderOptions = {},
  ) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new DecoderError(`capacity: ${capacity} is not allowed (must be an integer ≥ 1)`);
    const entries = options.prefixCacheEntries ?? capacity;
    if (!Number.isInteger(entries) || entries < 0)
      throw new DecoderError(`prefixCacheEntries: ${entries} is not allowed (must be an integer ≥ 0)`);
    this.policy = policy;
    this.slots = new Array(capacity).fill(undefined);
    this.prefixCacheEntries = entries;
    // The SIMD loops take whole f32x4 lanes of a head: head sizes not a multiple of 4 use the JS kernels.
    this.memory = new KernelMemory({ simd: !options.noSimd && policy.dims.headDim % 4 === 0 });
    const width = policy.dims.heads * policy.dims.headDim;
    this.scratch = {
      q: this.memory.alloc(width),
      scores: this.memory.alloc(policy.config.contextLength + 3), // padded to whole f32x4 lanes
      out: this.memory.alloc(width),
    };
  }

  get policyVersion(): number {
    return this.policy.version;
  }

  get active(): number {
    return this.activeCount;
  }

  /** True when attention runs on the wasm SIMD kernel (false: the plain-JS fallback). */
  get simd(): boolean {
    return this.memory.simd;
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

  private kvWidth(): number {
    return this.policy.dims.kvHeads * this.policy.dims.headDim;
  }

  private ensureRows(state: SlotState, rows: number): void {
    if (rows <= state.rowsAllocated) return;
    const width = this.kvWidth();
    // Whole size-class blocks (KernelMemory rounds up to a power of two anyway): the rows past the
    // request are room for the answer, so a sequence does not move its cache on its first step.
    const wanted = Math.max(rows, state.rowsAllocated * 2, 64);
    const next = Math.min(
      this.policy.config.contextLength,
      Math.floor(KernelMemory.blockBytes(wanted * width) / 4 / width),
    );
    const grow = (old: number) => {
      const fresh = this.memory.alloc(next * width);
      if (state.rowsAllocated > 0) {
        const f = this.memory.floats;
        f.copyWithin(fresh >> 2, old >> 2, (old >> 2) + state.length * width);
        this.memory.free(old, state.rowsAllocated * width);
      }
      return fresh;
    };
    state.keys = state.keys.map(grow);
    state.values = state.values.map(grow);
    state.rowsAllocated = next;
  }

  private release(state: SlotState): void {
    const width = this.kvWidth();
    if (state.rowsAllocated === 0) return;
    for (const p of [...state.keys, ...state.values]) this.memory.free(p, state.rowsAllocated * width);
    state.rowsAllocated = 0;
  }

  /** Takes the kept cache whose ids the prompt continues (the longest such), or undefined. */
  private takeRetired(prompt: readonly number[]): SlotState | undefined {
    let best = -1;
    this.retired.forEach((state, i) => {
      const ids = state.ids;
      // The prompt's last position is always recomputed (its logits are the answer).
      if (ids.length >= prompt.length || (best >= 0 && ids.length <= this.retired[best]!.ids.length)) return;
      for (let t = 0; t < ids.length; t++) if (ids[t] !== prompt[t]) return;
      best = i;
    });
    if (best < 0) return undefined;
    return this.retired.splice(best, 1)[0];
  }

  add(prompt: readonly number[]): { slot: number; logits: Float32Array } {
    const policy = this.livePolicy();
    policy.validateTokens(prompt, "prompt");
    const slot = this.slots.indexOf(undefined);
    if (slot < 0) throw new DecoderError(`no free slot: all ${this.capacity} are in use`);
    let state = this.takeRetired(prompt);
    if (state) {
      this.prefixStats.hits += 1;
      this.prefixStats.reusedTokens += state.length;
      state.ids.push(...prompt.slice(state.length));
    } else {
      state = {
        length: 0,
        ids: [...prompt],
        rowsAllocated: 0,
        keys: new Array<number>(policy.config.layers).fill(0),
        values: new Array<number>(policy.config.layers).fill(0),
      };
    }
    let logits: Float32Array;
    try {
      logits = this.prefill(policy, state);
    } catch (error) {
      this.release(state);
      throw error;
    }
    this.slots[slot] = state;
    this.activeCount += 1;
    return { slot, logits };
  }

  /** Computes the cache rows state.length .. ids.length−1 with `policy`; returns the last row's next-token logits. */
  private prefill(policy: TransformerPolicy, state: SlotState): Float32Array {
    const from = state.length;
    const L = state.ids.length;
    // One row more than the prompt: its first generated token goes there.
    this.ensureRows(state, Math.min(L + 1, policy.config.contextLength));
    const positions = Array.from({ length: L - from }, (_, i) => from + i);
    this.prefixStats.prefilledTokens += positions.length;
    const logits = this.forward(
      policy,
      Int32Array.from(state.ids.slice(from)),
      { states: positions.map(() => state), positions },
      true,
    );
    state.length = L;
    return logits;
  }

  /** The policy's weights laid out for decoding, rebuilt when the policy or its weights change. */
  private weightsFor(policy: TransformerPolicy): DecodeWeights {
    if (!this.weights?.current(policy)) {
      this.weights?.dispose();
      this.weights = new DecodeWeights(policy);
    }
    return this.weights;
  }

  private buffersFor(rows: number, dims: Dims): PassBuffers {
    if (!this.buffers || this.buffers.rows < rows) this.buffers = new PassBuffers(rows, dims);
    return this.buffers;
  }

  /**
   * One pass of `ids` through the blocks: each row's key and value are written to its sequence's
   * cache at its position and its query attends to positions 0..position of that cache. Returns
   * the next-token logits of every row ([rows·V]) or, with `lastOnly`, of the last row ([V]).
   *
   * The residual stream stays on the host between the matMuls (norms, SwiGLU, residual adds and
   * attention are loops over it): per block four matMuls and nothing else runs as a TF.js op, and
   * a step allocates nothing but its logits. Same math as the training path (TransformerPolicy.hidden).
   */
  private forward(policy: TransformerPolicy, ids: Int32Array, rows: RowBatch, lastOnly: boolean): Float32Array {
    const { dims } = policy;
    const { dModel: d, ffnHidden: F, normEps: eps, qkvWidth: C } = dims;
    const n = ids.length;
    const w = this.weightsFor(policy);
    const b = this.buffersFor(n, dims);
    const { x, h, qkv, attn, ffn } = b;
    for (let r = 0; r < n; r++) x.set(w.embed.subarray(ids[r]! * d, ids[r]! * d + d), r * d);
    const addToResidual = (product: Float32Array) => {
      for (let i = 0; i < n * d; i++) x[i]! += product[i]!;
    };
    for (let l = 0; l < w.layers.length; l++) {
      const layer = w.layers[l]!;
      rmsNormInto(x, layer.attnNorm, n, d, eps, h);
      hostMatMul(h, n, layer.wqkv, (product) => qkv.set(product.subarray(0, n * C)));
      const bias = layer.bqkv;
      if (bias) for (let i = 0; i < n * C; i++) qkv[i]! += bias[i % C]!;
      this.attendRows(policy, l, qkv, rows, attn);
      hostMatMul(attn, n, layer.wo, addToResidual);
      rmsNormInto(x, layer.ffnNorm, n, d, eps, h);
      const ffnRows = this.swiglu(h, n, layer.wGateUp, F, ffn);
      hostMatMul(ffnRows, n, layer.wDown, addToResidual);
    }
    const first = lastOnly ? n - 1 : 0;
    const m = n - first;
    rmsNormInto(x.subarray(first * d), w.finalNorm, m, d, eps, h);
    let logits = new Float32Array(0);
    hostMatMul(h, m, w.head, (product) => {
      logits = product.slice(0, m * dims.vocabSize);
    });
    return logits;
  }

  /**
   * silu(h·Wgate)·(h·Wup) for n rows from the fused [d, 2F] matrix. Returns the [n, F] rows: in
   * kernel memory (SIMD exp) when F fills whole f32x4 lanes, else in `fallback` (Math.exp).
   */
  private swiglu(h: Float32Array, n: number, wGateUp: tf.Tensor2D, F: number, fallback: Float32Array): Float32Array {
    if (this.memory.simd && F % 4 === 0) {
      if (!this.ffnScratch || this.ffnScratch.rows < n) {
        if (this.ffnScratch) {
          this.memory.free(this.ffnScratch.gu, this.ffnScratch.rows * 2 * F);
          this.memory.free(this.ffnScratch.out, this.ffnScratch.rows * F);
        }
        this.ffnScratch = { rows: n, gu: this.memory.alloc(n * 2 * F), out: this.memory.alloc(n * F) };
      }
      const { gu, out } = this.ffnScratch;
      hostMatMul(h, n, wGateUp, (product) => this.memory.floats.set(product.subarray(0, n * 2 * F), gu >> 2));
      const rowBytes = F * 4;
      for (let r = 0; r < n; r++)
        this.memory.kernels.siluMul(gu + 2 * r * rowBytes, gu + (2 * r + 1) * rowBytes, out + r * rowBytes, rowBytes);
      return this.memory.floats.subarray(out >> 2, (out >> 2) + n * F);
    }
    hostMatMul(h, n, wGateUp, (gu) => {
      for (let r = 0; r < n; r++) {
        const src = r * 2 * F;
        const dst = r * F;
        for (let j = 0; j < F; j++) {
          const g = gu[src + j]!;
          fallback[dst + j] = (g / (1 + Math.exp(-g))) * gu[src + F + j]!;
        }
      }
    });
    return fallback;
  }

  /** Rotary (in place in `buf`), cache write and attention for every row of one layer, into `out` [rows, heads·hd]. */
  private attendRows(
    policy: TransformerPolicy,
    layer: number,
    buf: Float32Array,
    rows: RowBatch,
    out: Float32Array,
  ): void {
    const { dims, rope } = policy;
    const { heads, kvHeads, headDim: hd, qkvWidth: C } = dims;
    const rep = heads / kvHeads;
    const kvWidth = kvHeads * hd;
    const n = rows.states.length;
    const f = this.memory.floats;
    // Every row's key and value first, so rows of one sequence (a prefill) see each other.
    for (let i = 0; i < n; i++) {
      const state = rows.states[i]!;
      const pos = rows.positions[i]!;
      const base = i * C;
      rope.rotate(buf, base, heads + kvHeads, pos);
      f.set(buf.subarray(base + heads * hd, base + heads * hd + kvWidth), (state.keys[layer]! >> 2) + pos * kvWidth);
      f.set(buf.subarray(base + heads * hd + kvWidth, base + C), (state.values[layer]! >> 2) + pos * kvWidth);
    }
    const { dotRows, axpyRows, expSum } = this.memory.kernels;
    const { q, scores, out: o } = this.scratch;
    const qi = q >> 2;
    const si = scores >> 2;
    const oi = o >> 2;
    const scale = 1 / Math.sqrt(hd);
    const hdBytes = hd * 4;
    const strideBytes = kvWidth * 4;
    for (let i = 0; i < n; i++) {
      const state = rows.states[i]!;
      const positions = rows.positions[i]! + 1;
      const padded = (positions + 3) & ~3;
      const base = i * C;
      for (let e = 0; e < heads * hd; e++) f[qi + e] = buf[base + e]! * scale;
      for (let h = 0; h < heads; h++) {
        const kvOffset = Math.floor(h / rep) * hdBytes;
        dotRows(q + h * hdBytes, state.keys[layer]! + kvOffset, scores, positions, hdBytes, strideBytes);
        let max = Number.NEGATIVE_INFINITY;
        for (let j = 0; j < positions; j++) if (f[si + j]! > max) max = f[si + j]!;
        // exp over whole f32x4 lanes: the lanes past `positions` are padded with −∞ (→ ~0).
        for (let j = positions; j < padded; j++) f[si + j] = Number.NEGATIVE_INFINITY;
        const sum = expSum(scores, padded * 4, max);
        axpyRows(scores, state.values[layer]! + kvOffset, o + h * hdBytes, positions, hdBytes, strideBytes);
        const inv = 1 / sum;
        const dst = i * heads * hd + h * hd;
        for (let e = 0; e < hd; e++) out[dst + e] = f[oi + h * hd + e]! * inv;
      }
    }
  }

  addAndDraw(prompt: readonly number[], draw: TokenDraw): { slot: number; drawn: DrawnToken } {
    const { slot, logits } = this.add(prompt);
    return { slot, drawn: drawToken(logits, draw) };
  }

  stepAndDraw(slots: readonly number[], tokens: readonly number[], draws: readonly TokenDraw[]): DrawnToken[] {
    checkDraws(slots, draws);
    return this.step(slots, tokens).map((logits, i) => drawToken(logits, draws[i] as TokenDraw));
  }

  step(slots: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (slots.length !== tokens.length)
      throw new DecoderError(`step: ${slots.length} slots but ${tokens.length} tokens (one token per slot)`);
    if (slots.length === 0) return [];
    const policy = this.livePolicy();
    const { config } = policy;
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
      return state;
    });
    for (const state of states) this.ensureRows(state, state.length + 1);
    const logits = this.forward(
      policy,
      Int32Array.from(tokens),
      { states, positions: states.map((s) => s.length) },
      false,
    );
    states.forEach((state, i) => {
      state.length += 1;
      state.ids.push(tokens[i] as number);
    });
    const V = config.vocabSize;
    // Views into one buffer: no per-slot copy of the logits.
    return states.map((_, i) => logits.subarray(i * V, (i + 1) * V));
  }

  remove(slot: number): void {
    const state = this.slotState(slot);
    this.slots[slot] = undefined;
    this.activeCount -= 1;
    if (this.prefixCacheEntries === 0) {
      this.release(state);
      return;
    }
    this.retired.push(state);
    while (this.retired.length > this.prefixCacheEntries) this.release(this.retired.shift()!);
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
    // Kept caches were computed by the old weights.
    for (const state of this.retired.splice(0)) this.release(state);
    // No token may belong to two policies: a cache computed by the old weights would make every
    // later token's distribution a mix of both, matching neither version's log-prob. So each
    // running sequence's cache is recomputed from its ids with the new weights (one prefill per
    // sequence, as AReaL's interruptible generation does), and tokens sampled from here on are
    // exactly the new version's. Finishing on the old weights instead would hold two policies in
    // memory and keep serving a version the trainer has moved past.
    for (const state of this.slots) {
      if (!state) continue;
      state.length = 0;
      this.prefill(policy, state);
    }
  }

  dispose(): void {
    this.weights?.dispose();
    this.weights = undefined;
    this.buffers = undefined;
    for (const state of this.slots) if (state) this.release(state);
    for (const state of this.retired.splice(0)) this.release(state);
    this.slots.fill(undefined);
    this.activeCount = 0;
  }
}
