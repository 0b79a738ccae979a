import { ModelConfig } from "../../shared/config/policy.ts";
import { drawToken } from "../../shared/model/sampling.ts";
import type { Decoder, DrawnToken, InferencePolicy, TokenDraw } from "../../shared/model/types.ts";

/**
 * A fake policy for scheduler/server tests: at generated position t of a slot its logits put
 * `margin` on `script[t]` (0 elsewhere); past the script they favour `fallback`. Records every
 * decode step's batch size, and can run a hook after a given step (to swap weights mid-request).
 */
export class ScriptedPolicy implements InferencePolicy {
  readonly config: ModelConfig;
  disposed = false;
  /** The decoder the server created (to hook into its steps). */
  decoder: ScriptedDecoder | undefined;
  constructor(
    readonly version: number,
    readonly script: readonly number[],
    readonly options: { vocabSize: number; contextLength: number; margin?: number; fallback: number },
  ) {
    this.config = ModelConfig.parse({ vocabSize: options.vocabSize, contextLength: options.contextLength });
  }
  createDecoder(capacity: number): ScriptedDecoder {
    this.decoder = new ScriptedDecoder(this, capacity);
    return this.decoder;
  }
  logits(position: number): Float32Array {
    const logits = new Float32Array(this.options.vocabSize);
    logits[this.script[position] ?? this.options.fallback] = this.options.margin ?? 30;
    return logits;
  }
  dispose(): void {
    this.disposed = true;
  }
}

export class ScriptedDecoder implements Decoder {
  private readonly slots: Array<{ generated: number; length: number } | undefined>;
  readonly batchSizes: number[] = [];
  /** Called after each step with the number of steps run so far. */
  afterStep: ((steps: number) => void) | undefined;

  constructor(
    private policy: ScriptedPolicy,
    readonly capacity: number,
  ) {
    this.slots = new Array(capacity).fill(undefined);
  }
  get policyVersion(): number {
    return this.policy.version;
  }
  get active(): number {
    return this.slots.filter(Boolean).length;
  }
  add(prompt: readonly number[]): { slot: number; logits: Float32Array } {
    if (prompt.length > this.policy.config.contextLength) throw new Error("prompt exceeds the context");
    const slot = this.slots.indexOf(undefined);
    if (slot < 0) throw new Error("no free slot");
    this.slots[slot] = { generated: 0, length: prompt.length };
    return { slot, logits: this.policy.logits(0) };
  }
  step(slots: readonly number[], tokens: readonly number[]): Float32Array[] {
    if (slots.length !== tokens.length) throw new Error("slots/tokens mismatch");
    this.batchSizes.push(slots.length);
    const out = slots.map((slot) => {
      const state = this.slots[slot];
      if (!state) throw new Error(`slot ${slot} not in use`);
      if (state.length >= this.policy.config.contextLength) throw new Error(`slot ${slot} is full`);
      state.generated += 1;
      state.length += 1;
      return this.policy.logits(state.generated);
    });
    this.afterStep?.(this.batchSizes.length);
    return out;
  }
  addAndDraw(prompt: readonly number[], draw: TokenDraw): { slot: number; drawn: DrawnToken } {
    const { slot, logits } = this.add(prompt);
    return { slot, drawn: drawToken(logits, draw) };
  }
  stepAndDraw(slots: readonly number[], tokens: readonly number[], draws: readonly TokenDraw[]): DrawnToken[] {
    return this.step(slots, tokens).map((logits, i) => drawToken(logits, draws[i]!));
  }
  remove(slot: number): void {
    if (!this.slots[slot]) throw new Error(`slot ${slot} not in use`);
    this.slots[slot] = undefined;
  }
  setPolicy(policy: InferencePolicy): void {
    if (!(policy instanceof ScriptedPolicy)) throw new Error("expected a ScriptedPolicy");
    this.policy = policy;
  }
  dispose(): void {}
}
