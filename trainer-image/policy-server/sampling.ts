/**
 * Token sampling with a per-request seeded RNG. The reported log-prob is always
 * log_softmax(logits / temperature)[token] over the FULL vocabulary (the convention the trainer
 * recomputes), even when top_p restricts the candidates; temperature 0 means greedy and reports
 * log_softmax(logits)[token].
 */

import { seededRandom } from "../../shared/rl/random.ts";

/** Deterministic 32-bit RNG (mulberry32): same seed, same stream. */
export class SeededRandom {
  private readonly draw: () => number;
  constructor(seed: number) {
    this.draw = seededRandom(seed);
  }
  /** Uniform in [0, 1). */
  next(): number {
    return this.draw();
  }
}

export interface Sampled {
  readonly token: number;
  readonly logprob: number;
}

/** Samples one token from `logits` ([vocab]); see the module comment for the log-prob convention. */
export function sampleToken(logits: Float32Array, temperature: number, topP: number, rng: SeededRandom): Sampled {
  const vocab = logits.length;
  const scale = temperature > 0 ? 1 / temperature : 1;
  let max = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < vocab; j++) max = Math.max(max, (logits[j] as number) * scale);
  const weights = new Float64Array(vocab);
  let sum = 0;
  for (let j = 0; j < vocab; j++) {
    const w = Math.exp((logits[j] as number) * scale - max);
    weights[j] = w;
    sum += w;
  }
  const logZ = max + Math.log(sum);
  const logprobOf = (token: number) => (logits[token] as number) * scale - logZ;

  if (temperature === 0) {
    let best = 0;
    for (let j = 1; j < vocab; j++) if ((logits[j] as number) > (logits[best] as number)) best = j;
    return { token: best, logprob: logprobOf(best) };
  }

  let candidates: ArrayLike<number> | undefined;
  let mass = sum;
  if (topP < 1) {
    // Nucleus: the smallest set of most likely tokens whose probability reaches topP.
    const order = Array.from({ length: vocab }, (_, j) => j).sort(
      (a, b) => (weights[b] as number) - (weights[a] as number) || a - b,
    );
    let cumulative = 0;
    let cut = 0;
    while (cut < vocab && cumulative < topP * sum) cumulative += weights[order[cut++] as number] as number;
    candidates = order.slice(0, Math.max(cut, 1));
    mass = cumulative;
  }

  let r = rng.next() * mass;
  if (candidates) {
    for (let i = 0; i < candidates.length; i++) {
      const token = candidates[i] as number;
      r -= weights[token] as number;
      if (r < 0) return { token, logprob: logprobOf(token) };
    }
    const lastToken = candidates[candidates.length - 1] as number;
    return { token: lastToken, logprob: logprobOf(lastToken) };
  }
  let lastPositive = 0;
  for (let j = 0; j < vocab; j++) {
    const w = weights[j] as number;
    if (w > 0) lastPositive = j;
    r -= w;
    if (r < 0) return { token: j, logprob: logprobOf(j) };
  }
  // Rounding left r at ~0: take the last token with any mass.
  return { token: lastPositive, logprob: logprobOf(lastPositive) };
}
