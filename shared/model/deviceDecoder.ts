import * as tf from "@tensorflow/tfjs";
import { checkDraws, DecoderError } from "./decoder.ts";
import { attendSequence, rotaryAt, rotate } from "./deviceOps.ts";
import { drawnTokens, drawOnDevice } from "./deviceSampling.ts";
import type { TransformerPolicy } from "./transformer.ts";
import type { Decoder, DrawnToken, InferencePolicy, TokenDraw } from "./types.ts";

/** One sequence: its ids and, per layer, its rotated keys and its values [length, kvHeads, hd] on the device. */
interface Sequence {
  readonly ids: number[];
  keys: tf.Tensor3D[];
  values: tf.Tensor3D[];
}

/** Rows of one pass: `count` consecutive rows belong to `seq`, at positions first .. first + count − 1. */
interface Group {
  readonly seq: Sequence;
  readonly first: number;
  readonly count: number;
}

function isTransformer(policy: InferencePolicy): policy is TransformerPolicy {
  return typeof (policy as Partial<TransformerPolicy>).hidden === "function";
}

/**
 * Continuous-batching decoder for device backends (webgpu, tensorflow): the model's own forward
 * (TransformerPolicy.hidden) with the KV caches as device tensors, so a step's only host read is
 * what its caller needs: the drawn tokens and their log-probs (addAndDraw, stepAndDraw: the
 * sampler runs on the device too, deviceSampling.ts), or the logits [rows, V] (add, step).
 * The wasm/cpu decoder (decoder.ts) keeps the
 * residual stream on the host instead, which on a device would copy every activation each way.
 *
 * Prefix cache, as in decoder.ts: a removed sequence's cache is kept (up to `capacity` of them,
 * least recently retired dropped first); a prompt that starts with all of a kept sequence's ids
 * takes that cache over and prefills only the rest. Changing weights empties it.
 */
export class DeviceDecoder implements Decoder {
  private policy: TransformerPolicy;
  private readonly slots: Array<Sequence | undefined>;
  private activeCount = 0;
  private readonly retired: Sequence[] = [];
  readonly prefixStats = { hits: 0, reusedTokens: 0, prefilledTokens: 0 };

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

  private livePolicy(): TransformerPolicy {
    if (this.policy.isDisposed)
      throw new DecoderError(`policy version ${this.policy.version} was disposed while this decoder still uses it`);
    return this.policy;
  }

  private sequence(slot: number): Sequence {
    const seq = Number.isInteger(slot) ? this.slots[slot] : undefined;
    if (!seq) throw new DecoderError(`slot ${slot} is not in use (capacity ${this.capacity})`);
    return seq;
  }

  /**
   * One pass of `ids` (rows grouped by sequence) through the blocks: each group's new keys and
   * values join its cache, its queries attend to the whole cache. The logits of each group's last
   * row go through `finish` (the logits themselves by default), read to the host in one go.
   */
  private forward(
    policy: TransformerPolicy,
    ids: Int32Array,
    groups: readonly Group[],
    finish: (logits: tf.Tensor2D) => tf.Tensor2D = (logits) => logits,
  ): Float32Array {
    const { heads: H, kvHeads: KV, headDim: hd } = policy.dims;
    const positions = new Int32Array(ids.length);
    let row = 0;
    for (const g of groups) for (let i = 0; i < g.count; i++) positions[row++] = g.first + i;
    const pending = groups.map(() => ({ keys: [] as tf.Tensor3D[], values: [] as tf.Tensor3D[] }));
    let logits: tf.Tensor2D | undefined;
    try {
      logits = tf.tidy(() => {
        const { cos, sin } = rotaryAt(policy.rope, positions);
        const hidden = policy.hidden(ids, (layer, qkv) => {
          const n = qkv.shape[0];
          const q = rotate(tf.reshape(tf.slice(qkv, [0, 0], [n, H * hd]), [n, H, hd]), cos, sin);
          const k = rotate(tf.reshape(tf.slice(qkv, [0, H * hd], [n, KV * hd]), [n, KV, hd]), cos, sin);
          const v = tf.reshape(tf.slice(qkv, [0, (H + KV) * hd], [n, KV * hd]), [n, KV, hd]) as tf.Tensor3D;
          const outputs: tf.Tensor2D[] = [];
          let r0 = 0;
          groups.forEach((g, i) => {
            const take = (t: tf.Tensor3D): tf.Tensor3D =>
              groups.length === 1 ? t : tf.slice(t, [r0, 0, 0], [g.count, -1, -1]);
            const past = g.seq.keys[layer];
            const keys = past ? tf.concat([past, take(k)], 0) : take(k);
            const values = past ? tf.concat([g.seq.values[layer] as tf.Tensor3D, take(v)], 0) : take(v);
            // Kept past this tidy; they replace the cache only once the whole pass succeeded.
            pending[i]!.keys.push(tf.keep(keys));
            pending[i]!.values.push(tf.keep(values));
            outputs.push(attendSequence(take(q), keys, values, g.first));
            r0 += g.count;
          });
          return outputs.length === 1 ? (outputs[0] as tf.Tensor2D) : tf.concat(outputs, 0);
        });
        // Only the rows whose next token is wanted go through the head ([rows, V] is the big one).
        let last = -1;
        const wanted = groups.map((g) => {
          last += g.count;
          return last;
        });
        const picked = wanted.length === ids.length ? hidden : tf.gather(hidden, tf.tensor1d(wanted, "int32"));
        return finish(policy.head(picked as tf.Tensor2D));
      });
      const values = logits.dataSync() as Float32Array;
      groups.forEach((g, i) => {
        for (const t of [...g.seq.keys, ...g.seq.values]) t.dispose();
        g.seq.keys = pending[i]!.keys;
        g.seq.values = pending[i]!.values;
      });
      return values;
    } catch (error) {
      for (const p of pending) for (const t of [...p.keys, ...p.values]) t.dispose();
      throw error;
    } finally {
      logits?.dispose();
    }
  }

  /** Computes the cache rows `from` .. ids.length − 1 (0: all of them); returns the last row's logits through `finish`. */
  private prefill(
    policy: TransformerPolicy,
    seq: Sequence,
    from = 0,
    finish?: (logits: tf.Tensor2D) => tf.Tensor2D,
  ): Float32Array {
    if (from === 0) release(seq);
    this.prefixStats.prefilledTokens += seq.ids.length - from;
    return this.forward(
      policy,
      Int32Array.from(seq.ids.slice(from)),
      [{ seq, first: from, count: seq.ids.length - from }],
      finish,
    );
  }

  /** Takes the kept cache whose ids the prompt continues (the longest such), or undefined. */
  private takeRetired(prompt: readonly number[]): Sequence | undefined {
    let best = -1;
    this.retired.forEach((seq, i) => {
      // The prompt's last position is always recomputed (its logits are the answer).
      if (seq.ids.length >= prompt.length || (best >= 0 && seq.ids.length <= this.retired[best]!.ids.length)) return;
      for (let t = 0; t < seq.ids.length; t++) if (seq.ids[t] !== prompt[t]) return;
      best = i;
    });
    return best < 0 ? undefined : this.retired.splice(best, 1)[0];
  }

  add(prompt: readonly number[]): { slot: number; logits: Float32Array } {
    const { slot, values } = this.admit(prompt);
    return { slot, logits: values };
  }

  addAndDraw(prompt: readonly number[], draw: TokenDraw): { slot: number; drawn: DrawnToken } {
    const { slot, values } = this.admit(prompt, (logits) => drawOnDevice(logits, [draw]));
    return { slot, drawn: drawnTokens(values)[0] as DrawnToken };
  }

  /** Prefills a free slot with the prompt; returns the slot and its last row's logits through `finish`. */
  private admit(
    prompt: readonly number[],
    finish?: (logits: tf.Tensor2D) => tf.Tensor2D,
  ): { slot: number; values: Float32Array } {
    const policy = this.livePolicy();
    policy.validateTokens(prompt, "prompt");
    const slot = this.slots.indexOf(undefined);
    if (slot < 0) throw new DecoderError(`no free slot: all ${this.capacity} are in use`);
    const kept = this.takeRetired(prompt);
    const from = kept?.ids.length ?? 0;
    const seq: Sequence = kept ?? { ids: [], keys: [], values: [] };
    if (kept) {
      this.prefixStats.hits += 1;
      this.prefixStats.reusedTokens += from;
    }
    seq.ids.push(...prompt.slice(from));
    let values: Float32Array;
    try {
      values = this.prefill(policy, seq, from, finish);
    } catch (error) {
      release(seq);
      throw error;
    }
    this.slots[slot] = seq;
    this.activeCount += 1;
    return { slot, values };
  }

  step(slots: readonly number[], tokens: readonly number[]): Float32Array[] {
    const V = this.livePolicy().config.vocabSize;
    const logits = this.decode(slots, tokens);
    return slots.map((_, i) => logits.subarray(i * V, (i + 1) * V));
  }

  stepAndDraw(slots: readonly number[], tokens: readonly number[], draws: readonly TokenDraw[]): DrawnToken[] {
    checkDraws(slots, draws);
    return drawnTokens(this.decode(slots, tokens, (logits) => drawOnDevice(logits, draws)));
  }

  /** One batched decode step: slots[i] consumes tokens[i]; returns the rows' logits through `finish`. */
  private decode(
    slots: readonly number[],
    tokens: readonly number[],
    finish?: (logits: tf.Tensor2D) => tf.Tensor2D,
  ): Float32Array {
    if (slots.length !== tokens.length)
      throw new DecoderError(`step: ${slots.length} slots but ${tokens.length} tokens (one token per slot)`);
    if (slots.length === 0) return new Float32Array(0);
    const policy = this.livePolicy();
    const { contextLength, vocabSize: V } = policy.config;
    const seen = new Set<number>();
    const groups = slots.map((slot, i): Group => {
      if (seen.has(slot)) throw new DecoderError(`step: slot ${slot} appears twice`);
      seen.add(slot);
      const seq = this.sequence(slot);
      if (seq.ids.length >= contextLength)
        throw new DecoderError(`step: slot ${slot} is full (context length ${contextLength})`);
      const t = tokens[i]!;
      if (!Number.isInteger(t) || t < 0 || t >= V)
        throw new DecoderError(`step: tokens[${i}] = ${t} is outside the vocabulary 0..${V - 1}`);
      return { seq, first: seq.ids.length, count: 1 };
    });
    const values = this.forward(policy, Int32Array.from(tokens), groups, finish);
    groups.forEach((g, i) => {
      g.seq.ids.push(tokens[i] as number);
    });
    return values;
  }

  remove(slot: number): void {
    const seq = this.sequence(slot);
    this.slots[slot] = undefined;
    this.activeCount -= 1;
    this.retired.push(seq);
    while (this.retired.length > this.capacity) release(this.retired.shift() as Sequence);
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
    for (const seq of this.retired.splice(0)) release(seq);
    // As in decoder.ts: every running sequence's cache is recomputed by the new weights.
    for (const seq of this.slots) if (seq) this.prefill(policy, seq);
  }

  dispose(): void {
    for (const seq of this.slots) if (seq) release(seq);
    for (const seq of this.retired.splice(0)) release(seq);
    this.slots.fill(undefined);
    this.activeCount = 0;
  }
}

/** Frees a sequence's cache tensors. */
function release(seq: Sequence): void {
  for (const t of [...seq.keys, ...seq.values]) t.dispose();
  seq.keys = [];
  seq.values = [];
}
