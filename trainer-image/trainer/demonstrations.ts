import type { ChatCodec } from "../../shared/chat/index.ts";
import type { ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";
import { seededRandomFrom } from "../../shared/rl/random.ts";
import type { LossRow } from "./loss.ts";

/**
 * Expert demonstrations beside the RL loss (`trainer.demonstrations`; InstructGPT's PPO-ptx with
 * expert traces as the second data set): each step adds a few tokenized expert episodes as loss
 * rows whose only term is their negative log-likelihood on assistant tokens, weighted `coef`.
 * Which episodes a step gets is drawn from the experiment's seed and the step number, so the
 * seeded mode still gives the same weights for the same seed.
 */

/** A successful expert episode to imitate, as the `agentrl trainer` command collects it. */
export interface DemonstrationTrace {
  readonly messages: readonly ChatMessage[];
  readonly tools: readonly ToolSpec[];
}

/** A demonstration tokenized with the trained policy's codec: 1 on the assistant tokens the loss imitates. */
export interface Demonstration {
  readonly tokens: Int32Array;
  readonly weights: Float32Array;
}

/** Tokenizes the traces; those longer than the context or without an assistant token are left out. */
export function encodeDemonstrations(
  traces: readonly DemonstrationTrace[],
  codec: ChatCodec,
  contextLength: number,
): Demonstration[] {
  return traces
    .map((trace) => codec.encodeConversation(trace.messages, trace.tools))
    .filter((e) => e.tokens.length <= contextLength && e.lossMask.includes(1))
    .map((e) => ({ tokens: Int32Array.from(e.tokens), weights: Float32Array.from(e.lossMask) }));
}

/** The `count` demonstrations of one step: distinct, drawn from the seed and the step number. */
export function demonstrationsOfStep(
  all: readonly Demonstration[],
  count: number,
  seed: number,
  step: number,
): Demonstration[] {
  const random = seededRandomFrom(seed, "demonstrations", step);
  const picked = new Set<number>();
  while (picked.size < Math.min(count, all.length)) picked.add(Math.floor(random() * all.length));
  return [...picked].map((i) => all[i] as Demonstration);
}

/**
 * Loss rows for demonstrations: no policy or KL term (advantage 0, loss mask 0), no agreement
 * check (not fresh); their `demonstration` weights carry the imitation term.
 */
export function demonstrationRows(demonstrations: readonly Demonstration[]): LossRow[] {
  return demonstrations.map(({ tokens, weights }) => {
    const zeros = Array.from({ length: tokens.length }, () => 0);
    return {
      oldLogp: zeros,
      advantages: zeros,
      lossMask: zeros,
      fresh: zeros,
      fullLogp: zeros,
      demonstration: weights,
    };
  });
}

/** Imitated tokens of a step's demonstrations: the per-token mean's denominator. */
export function demonstrationTokens(demonstrations: readonly Demonstration[]): number {
  return demonstrations.reduce((sum, d) => sum + d.weights.reduce((a, w) => a + w, 0), 0);
}
