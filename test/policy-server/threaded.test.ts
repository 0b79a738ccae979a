import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatCodec } from "../../shared/chat/index.ts";
import { LimitsConfig } from "../../shared/config/limits.ts";
import { createLogger } from "../../shared/log.ts";
import { createPolicy, initBackend, TransformerPolicy } from "../../shared/model/index.ts";
import { createPolicyServer } from "../../trainer-image/policy-server/app.ts";
import type { Generator, SchedulerStats } from "../../trainer-image/policy-server/scheduler.ts";
import { ThreadedScheduler } from "../../trainer-image/policy-server/threaded.ts";
import { SMALL, tokens } from "../model/support.ts";

beforeAll(async () => {
  await initBackend("wasm");
});

/**
 * The default model's size (d=128, 4 layers) with a small vocabulary: steps of milliseconds, so a
 * switch, an abort or a kill surely falls inside a long generation however fast the machine is.
 */
const DEFAULT_SIZED = { ...SMALL, dModel: 128, heads: 4, kvHeads: 2, ffnHidden: 384, layers: 4, contextLength: 2048 };
const stopped: Generator[] = [];
afterAll(async () => {
  for (const scheduler of stopped.splice(0)) await scheduler.stop();
});

function threaded(policy: ReturnType<typeof createPolicy>, capacity = 4, extra = {}): ThreadedScheduler {
  const scheduler = new ThreadedScheduler(policy, {
    capacity,
    stopTokenIds: [],
    contextLength: policy.config.contextLength,
    log: createLogger({ role: "test" }),
    ...extra,
  });
  stopped.push(scheduler);
  return scheduler;
}

async function until(condition: (stats: SchedulerStats) => boolean, scheduler: Generator, seconds = 20) {
  const deadline = Date.now() + seconds * 1000;
  while (!condition(scheduler.stats())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting; stats ${JSON.stringify(scheduler.stats())}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

describe("decoding in a worker thread (ThreadedScheduler)", () => {
  it("records for every token the version whose weights produced it across a switch", async () => {
    const v0 = createPolicy(DEFAULT_SIZED, 1, { version: 0 });
    const v1 = createPolicy(DEFAULT_SIZED, 2, { version: 1 });
    const scheduler = threaded(v0);
    const prompts = [tokens(6, 1), tokens(9, 2), tokens(4, 3)].map((p) => [...p]);
    const temperature = 0.9;
    const jobs = prompts.map((prompt, i) =>
      scheduler.generate({ prompt, maxTokens: 200, temperature, topP: 1, seed: 10 + i }),
    );
    await until((s) => s.generatedTokens >= 3 * 5, scheduler);
    expect(await scheduler.switchPolicy(v1)).toBe(0);
    const results = await Promise.all(jobs);
    expect(scheduler.stats()).toMatchObject({ policySwitches: 1, policyVersion: 1, completed: 3 });
    // The switch came after about 5 tokens of 200, so it falls inside the sequences (on a loaded
    // machine the worker may finish one before it lands): each runs on v0, then on v1, never back.
    const spanning = results.filter((result) => new Set(result.versions).size === 2);
    expect(spanning.length).toBeGreaterThan(0);
    for (const { versions } of results) expect(versions).toEqual([...versions].sort());
    let checked = 0;
    results.forEach((result, i) => {
      const prompt = prompts[i] as number[];
      const sequence = Int32Array.from([...prompt, ...result.tokens]);
      for (const [version, policy] of [
        [0, v0],
        [1, v1],
      ] as const) {
        const logp = policy.logProbs([sequence], temperature)[0] as Float32Array;
        result.tokens.forEach((_, t) => {
          if (result.versions[t] !== version) return;
          expect(Math.abs((result.logprobs[t] as number) - (logp[prompt.length + t] as number))).toBeLessThan(1e-4);
          checked += 1;
        });
      }
    });
    expect(checked).toBe(3 * 200);
    // Another architecture is refused and the server keeps serving v1.
    const other = createPolicy({ ...DEFAULT_SIZED, layers: 3 }, 3, { version: 2 });
    await expect(scheduler.switchPolicy(other)).rejects.toThrow(/config.layers differs/);
    const after = await scheduler.generate({ prompt: [1, 2, 3], maxTokens: 3, temperature, topP: 1, seed: 1 });
    expect(after.versions).toEqual([1, 1, 1]);
    for (const policy of [v0, v1, other]) policy.dispose();
  });

  it("an abort reaches the worker: the slot is freed long before max_tokens", async () => {
    const policy = createPolicy(DEFAULT_SIZED, 4);
    const scheduler = threaded(policy);
    const controller = new AbortController();
    const pending = scheduler
      .generate({ prompt: [5, 6, 7], maxTokens: 2000, temperature: 1, topP: 1, seed: 3, signal: controller.signal })
      .catch((error: unknown) => error);
    await until((s) => s.active === 1 && s.generatedTokens >= 2, scheduler);
    controller.abort();
    expect(await pending).toBeInstanceOf(Error);
    // The worker reports the sequence failed (dropped by its loop), not completed.
    await until((s) => s.failed === 1 && s.active === 0, scheduler);
    expect(scheduler.stats().completed).toBe(0);
    expect(scheduler.stats().generatedTokens).toBeLessThan(2000);
    policy.dispose();
  });

  it("a worker that dies fails its requests, is restarted from the installed weights, and gives up after maxRestarts", async () => {
    const policy = createPolicy(DEFAULT_SIZED, 5, { version: 7 });
    const scheduler = threaded(policy, 2, { maxRestarts: 1 });
    await scheduler.ready;
    const lost = scheduler
      .generate({ prompt: [1, 2], maxTokens: 2000, temperature: 1, topP: 1, seed: 1 })
      .catch((error: unknown) => error);
    await until((s) => s.active === 1, scheduler);
    await scheduler.killWorker();
    expect(String(await lost)).toMatch(/decode worker exited/);
    await scheduler.ready;
    expect(scheduler.workerStarts).toBe(2);
    const again = await scheduler.generate({ prompt: [1, 2], maxTokens: 4, temperature: 1, topP: 1, seed: 1 });
    expect(again.versions).toEqual([7, 7, 7, 7]);
    // A second crash within the window exceeds maxRestarts: no restart, every request fails loudly.
    await scheduler.killWorker();
    await expect(
      scheduler.generate({ prompt: [1, 2], maxTokens: 4, temperature: 1, topP: 1, seed: 1 }),
    ).rejects.toThrow(/not restarting/);
    expect(scheduler.workerStarts).toBe(2);
    policy.dispose();
  });

  it("a switch under way when it stops settles (done or refused) instead of holding the close", async () => {
    const v0 = createPolicy(DEFAULT_SIZED, 1, { version: 0 });
    const v1 = createPolicy(DEFAULT_SIZED, 2, { version: 1 });
    const scheduler = threaded(v0);
    await scheduler.ready;
    const busy = scheduler
      .generate({ prompt: [1, 2, 3], maxTokens: 2000, temperature: 1, topP: 1, seed: 1 })
      .catch((error: unknown) => error);
    await until((s) => s.active === 1, scheduler);
    const switching = scheduler.switchPolicy(v1).then(
      (previous) => ({ previous }),
      (error: unknown) => ({ error: String(error) }),
    );
    await scheduler.stop();
    const outcome = await switching;
    expect([{ previous: 0 }, { error: "GenerationError: the policy server is shutting down" }]).toContainEqual(outcome);
    expect(String(await busy)).toMatch(/shutting down/);
    await expect(scheduler.switchPolicy(v1)).rejects.toThrow(/stopped/);
    v0.dispose();
    v1.dispose();
  });
});

describe("a decode worker that cannot start", () => {
  it("rejects `ready` and every request with the reason, instead of hanging", async () => {
    // Weights that do not fit the config: the worker's TransformerPolicy refuses them.
    class Truncated extends TransformerPolicy {
      override values(): Map<string, Float32Array> {
        const values = super.values();
        values.delete("final_norm");
        return values;
      }
    }
    const base = createPolicy(SMALL, 8);
    const policy = new Truncated(base.config, base.values(), 0, { trainable: false });
    const scheduler = threaded(policy);
    await expect(scheduler.ready).rejects.toThrow(/final_norm/);
    await expect(
      scheduler.generate({ prompt: [1, 2], maxTokens: 2, temperature: 1, topP: 1, seed: 1 }),
    ).rejects.toThrow(/could not start.*final_norm/);
    for (const p of [base, policy]) p.dispose();
  });
});

describe("the policy server decoding in its worker", () => {
  it("answers GET /health and /stats before a long prefill finishes (decode is off the HTTP thread)", async () => {
    const policy = createPolicy(DEFAULT_SIZED, 6);
    const codec = ChatCodec.train([{ messages: [{ role: "user", content: "hello" }], tools: [] }], SMALL.vocabSize);
    const server = createPolicyServer({ policy, codec, log: createLogger({ role: "test" }), maxBatch: 4 });
    expect(server.scheduler).toBeInstanceOf(ThreadedScheduler);
    await (server.scheduler as ThreadedScheduler).ready;
    const order: string[] = [];
    // One prefill of 2,000 tokens: a single synchronous step of the decoder.
    const generation = Promise.resolve(
      server.app.request("/v1/chat/completions", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          messages: [{ role: "user", content: "x" }],
          max_tokens: 1,
          agentrl: { prompt_token_ids: [...tokens(2000, 9)] },
        }),
      }),
    ).then((response) => {
      order.push(`generation ${response.status}`);
    });
    // Once the request reached the scheduler (in this thread it would be done by then: the prefill blocks)
    await until((s) => s.queued + s.active + s.completed > 0, server.scheduler);
    const health = await server.app.request("/health");
    order.push(`health ${health.status}`);
    const stats = await server.app.request("/stats");
    order.push(`stats ${stats.status}`);
    await generation;
    expect(order).toEqual(["health 200", "stats 200", "generation 200"]);
    expect(server.scheduler.stats()).toMatchObject({ prefills: 1, completed: 1, prefilledTokens: 2000 });
    await server.close();
  });

  it("a request past its deadline answers 504 and its sequence stops in the worker", async () => {
    // 2,000 tokens of the default-sized model: seconds of decoding, far past the 0.3 s deadline.
    const policy = createPolicy(DEFAULT_SIZED, 10);
    const trained = ChatCodec.train([{ messages: [{ role: "user", content: "hello" }], tools: [] }], SMALL.vocabSize);
    // No stop tokens: random weights would sample one within a few hundred tokens, before the deadline on a fast machine.
    const codec = Object.create(trained, { stopTokenIds: { value: [] } }) as ChatCodec;
    const limits = LimitsConfig.parse({ policy: { requestDeadlineSeconds: 0.3 } });
    const server = createPolicyServer({ policy, codec, log: createLogger({ role: "test" }), maxBatch: 2, limits });
    await server.ready;
    const response = await server.app.request("/v1/chat/completions", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        messages: [{ role: "user", content: "x" }],
        max_tokens: 2000,
        agentrl: { prompt_token_ids: [1, 2, 3] },
      }),
    });
    expect(response.status).toBe(504);
    // The worker dropped it: counted failed, and it stops stepping.
    await until((s) => s.failed === 1 && s.active === 0, server.scheduler);
    const { decodeSteps } = server.scheduler.stats();
    expect(decodeSteps).toBeLessThan(1999);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(server.scheduler.stats().decodeSteps).toBe(decodeSteps);
    expect(server.scheduler.stats().completed).toBe(0);
    await server.close();
  });
});
