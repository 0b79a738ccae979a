/**
 * Drawing a token from next-token logits, on the host. The caller supplies the uniform number
 * (from its request's seeded stream, one per non-greedy draw), so a device decoder that draws on
 * the device (deviceSampling.ts) draws the same token from the same number. Each token comes with
 * two log-probs:
 * - `logprob`: log_softmax(logits / temperature)[token] over the FULL vocabulary, the quantity
 *   the trainer recomputes (what the rollout/trainer agreement check compares);
 * - `sampledLogprob`: the log-prob under the distribution actually sampled from — the nucleus
 *   renormalized when top_p < 1 (logprob − log of the nucleus mass), 0 for greedy (a point mass).
 *   This is the behaviour policy of an exact importance ratio.
 * Temperature 0 means greedy; its `logprob` is log_softmax(logits)[token].
 */

import type { DrawnToken, TokenDraw } from "./types.ts";

/**
 * Scratch reused by every call (sampling runs on one thread, one token at a time): no
 * vocabulary-sized allocation per token.
 */
let weightScratch = new Float64Array(0);
let orderScratch = new Int32Array(0);

/**
 * Draws one token from `logits` ([vocab]); see the module comment for the log-prob convention.
 * Full vocabulary (top_p 1): the first token in index order whose cumulative weight passes
 * uniform × total. Nucleus: the same over the tokens sorted by weight (ties: lower index first).
 */
export function drawToken(logits: Float32Array, { temperature, topP, uniform }: TokenDraw): DrawnToken {
  const vocab = logits.length;
  const scale = temperature > 0 ? 1 / temperature : 1;
  let max = Number.NEGATIVE_INFINITY;
  for (let j = 0; j < vocab; j++) max = Math.max(max, (logits[j] as number) * scale);
  if (weightScratch.length < vocab) weightScratch = new Float64Array(vocab);
  const weights = weightScratch;
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
    return { token: best, logprob: logprobOf(best), sampledLogprob: 0 };
  }

  let candidates = 0;
  let mass = sum;
  if (topP < 1) {
    // Nucleus: the smallest set of most likely tokens whose probability reaches topP.
    if (orderScratch.length < vocab) orderScratch = new Int32Array(vocab);
    const order = orderScratch.subarray(0, vocab);
    for (let j = 0; j < vocab; j++) order[j] = j;
    order.sort((a, b) => (weights[b] as number) - (weights[a] as number) || a - b);
    let cumulative = 0;
    let cut = 0;
    while (cut < vocab && cumulative < topP * sum) cumulative += weights[order[cut++] as number] as number;
    candidates = Math.max(cut, 1);
    mass = cumulative;
  }

  // log of the sampled distribution's share of the full one: 0 without a nucleus
  const logShare = Math.log(mass / sum);
  const sampled = (token: number): DrawnToken => {
    const logprob = logprobOf(token);
    return { token, logprob, sampledLogprob: logprob - logShare };
  };
  let r = uniform * mass;
  if (candidates > 0) {
    for (let i = 0; i < candidates; i++) {
      const token = orderScratch[i] as number;
      r -= weights[token] as number;
      if (r < 0) return sampled(token);
    }
    return sampled(orderScratch[candidates - 1] as number);
  }
  let lastPositive = 0;
  for (let j = 0; j < vocab; j++) {
    const w = weights[j] as number;
    if (w > 0) lastPositive = j;
    r -= w;
    if (r < 0) return sampled(j);
  }
  // Rounding left r at ~0: take the last token with any mass.
  return sampled(lastPositive);
}
