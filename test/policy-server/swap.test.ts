import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { beforeAll, describe, expect, it } from "vitest";
import { createPolicy, initBackend } from "../../shared/model/index.ts";
import { BatchScheduler } from "../../trainer-image/policy-server/scheduler.ts";
import { SMALL, tokens } from "../model/support.ts";

beforeAll(async () => {
  await initBackend("wasm");
});

describe("weights swapped in the middle of a generation", () => {
  it("records for every token a (version, log-prob) that its version reproduces on the same prefix", async () => {
    const policies = new Map([
      [0, createPolicy(SMALL, 1, { version: 0 })],
      [1, createPolicy(SMALL, 2, { version: 1 })],
    ]);
    const scheduler = new BatchScheduler(policies.get(0)!.createDecoder(4), {
      stopTokenIds: [],
      contextLength: SMALL.contextLength,
    });
    const prompts = [tokens(6, 1), tokens(9, 2), tokens(4, 3)].map((p) => [...p]);
    const temperature = 0.9;
    const jobs = prompts.map((prompt, i) =>
      scheduler.generate({ prompt, maxTokens: 24, temperature, topP: 1, seed: 10 + i }),
    );
    // swap once every sequence is a few tokens in
    while (scheduler.stats().generatedTokens < 3 * 5) await yieldToEventLoop();
    await scheduler.switchPolicy(policies.get(1)!);
    const results = await Promise.all(jobs);
    await scheduler.stop();

    let checked = 0;
    results.forEach((result, i) => {
      const prompt = prompts[i]!;
      expect(new Set(result.versions)).toEqual(new Set([0, 1])); // the swap fell inside every sequence
      const sequence = Int32Array.from([...prompt, ...result.tokens]);
      for (const version of [0, 1]) {
        const logp = policies.get(version)!.logProbs([sequence], temperature)[0]!;
        result.tokens.forEach((_, t) => {
          if (result.versions[t] !== version) return;
          expect(Math.abs((result.logprobs[t] as number) - (logp[prompt.length + t] as number))).toBeLessThan(1e-4);
          checked += 1;
        });
      }
      // without a nucleus the sampled distribution is the full one
      expect(result.sampledLogprobs).toEqual(result.logprobs);
    });
    expect(checked).toBe(3 * 24);
    for (const p of policies.values()) p.dispose();
  });

  it("a next turn that extends the previous prompt + output reuses its KV cache, log-probs still exact", async () => {
    const policy = createPolicy(SMALL, 5);
    const scheduler = new BatchScheduler(policy.createDecoder(2), {
      stopTokenIds: [],
      contextLength: SMALL.contextLength,
    });
    const temperature = 0.9;
    const prompt1 = [...tokens(7, 4)];
    const turn1 = await scheduler.generate({ prompt: prompt1, maxTokens: 6, temperature, topP: 1, seed: 1 });
    const prompt2 = [...prompt1, ...turn1.tokens, ...tokens(3, 5)];
    const turn2 = await scheduler.generate({ prompt: prompt2, maxTokens: 6, temperature, topP: 1, seed: 2 });
    // turn 1 fed back its prompt and 5 of its 6 tokens; turn 2 computed only the rest
    expect(scheduler.stats()).toMatchObject({ prefixCacheHits: 1, prefixCacheReusedTokens: 7 + 5 });
    // prompt 1 (7 tokens), then prompt 2 (7 + 6 + 3) less the 12 reused
    expect(scheduler.stats().prefilledTokens).toBe(7 + (16 - 12));
    await scheduler.stop();
    const logp = policy.logProbs([Int32Array.from([...prompt2, ...turn2.tokens])], temperature)[0]!;
    turn2.logprobs.forEach((lp, t) => {
      expect(Math.abs(lp - logp[prompt2.length + t]!)).toBeLessThan(1e-4);
    });
    policy.dispose();
  });
});
