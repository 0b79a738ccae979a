import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { requestsOf, TaskMixPlan } from "../../functions/feeder/plan.ts";
import { type EnvApi, runEpisode, trajectoryIdOf, trajectoryKey } from "../../functions/rollout/episode.ts";
import { PolicyPool } from "../../functions/rollout/pool.ts";
import { runRolloutWorker } from "../../functions/rollout/worker.ts";
import type { ChatCodec } from "../../shared/chat/index.ts";
import { type ExperimentConfig, type ExperimentConfigInput, parseConfig } from "../../shared/config/index.ts";
import { EnvCapacityError, EnvSessionLostError } from "../../shared/env/client.ts";
import {
  MemberDropped,
  type RolloutRequest,
  Trajectory,
  type TrajectoryReady,
} from "../../shared/protocol/messages.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { type Stack, startStack, waitFor } from "../env/helpers.ts";
import { tempDir } from "../support/tmp.ts";
import { exampleCodec, type FakePolicy, startFakePolicy } from "./rolloutHelpers.ts";

let codec: ChatCodec;
let stack: Stack;

beforeAll(async () => {
  codec = await exampleCodec();
  stack = await startStack([{ concurrency: 8 }]);
});
afterAll(async () => {
  await stack.close();
});

function configOf(overrides: ExperimentConfigInput = {}): ExperimentConfig {
  return parseConfig({
    experimentId: "roll",
    seed: 5,
    tasks: { mix: [{ name: "example", trainInstances: 50 }] },
    transport: { maxReceiveCount: 2 },
    ...overrides,
    rollout: { groupSize: 2, concurrency: 4, retryBackoffMs: 1, crossPolicy: { enabled: false }, ...overrides.rollout },
  });
}

function requestsFor(config: ExperimentConfig, groups: number): RolloutRequest[] {
  const plan = new TaskMixPlan([{ name: "example", weight: 1, start: 0, count: 50 }], config.seed);
  return Array.from({ length: groups }, () => plan.next()).flatMap((g) =>
    requestsOf(g, config.experimentId, config.rollout.groupSize),
  );
}

describe("rollout worker with the example task, a real controller and a fake policy server", () => {
  let dir: string;
  let transport: Transport;
  let policy: FakePolicy;

  beforeEach(async () => {
    dir = tempDir("rollout-");
    transport = await createTransport(parseConfig({ transport: { localDir: dir, maxReceiveCount: 2 } }).transport);
    policy = await startFakePolicy(codec);
  });
  afterEach(async () => {
    await policy.close();
    await transport.close();
  });

  /** Runs a worker until `count` trajectories are announced (or `until` holds), then stops it. */
  async function runUntil(
    config: ExperimentConfig,
    count: number,
    extra: { stale?: string; until?: () => Promise<boolean>; env?: EnvApi } = {},
  ) {
    const ready: TrajectoryReady[] = [];
    const stop = new AbortController();
    const worker = runRolloutWorker(config, transport, {
      env: extra.env ?? stack.client,
      pool: new PolicyPool(config.rollout, { current: policy.url, stale: extra.stale }),
      codec,
      signal: stop.signal,
      waitSeconds: 0,
      onReady: (r) => ready.push(r),
    });
    try {
      await waitFor(
        async () => ready.length >= count && (extra.until ? await extra.until() : true),
        20_000,
        "trajectories",
      );
    } finally {
      stop.abort();
    }
    return { ready, summary: await worker };
  }

  async function stored(key: string): Promise<Trajectory> {
    return Trajectory.parse(JSON.parse((await transport.store("trajectories").getText(key)) ?? "null"));
  }

  it("runs the agent loop: masks, per-token log-probs and versions, reward, store, event, ack", async () => {
    const config = configOf();
    const requests = requestsFor(config, 2);
    await transport.queue("rollout-requests").sendBatch(requests.map((r) => JSON.stringify(r)));
    const { ready, summary } = await runUntil(config, 4);
    expect(summary).toMatchObject({ done: 4, failed: 0, infraRetries: 0 });
    expect(await transport.queue("rollout-requests").approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    expect((await transport.queue("trajectories").approximateDepth()).visible).toBe(4);
    for (const event of ready) {
      const t = await stored(event.key);
      expect(event.key).toBe(trajectoryKey("roll", t.groupId, t.trajectoryId));
      expect(t).toMatchObject({ status: "completed", reward: 1, envReward: 1, turns: 3 });
      expect(event).toMatchObject({ reward: 1, minVersion: 3, maxVersion: 3, tokens: t.tokenIds.length });
      // the recorded tokens are exactly the conversation as the codec encodes it, masks included
      const encoded = codec.encodeConversation(t.messages, t.tools);
      expect(t.tokenIds).toEqual(encoded.tokens);
      expect(t.lossMask).toEqual(encoded.lossMask);
      // behaviour log-probs of the sampled distribution (the default), the full ones kept beside
      expect(t.behaviorLogprobs).toBe("sampled");
      t.lossMask.forEach((m, i) => {
        expect(t.logprobs[i]).toBe(m ? -0.25 : 0);
        expect(t.fullLogprobs?.[i]).toBe(m ? -0.5 : 0);
        expect(t.policyVersion[i]).toBe(m ? 3 : -1);
        expect(t.policyPool[i]).toBe(m ? "current" : null);
      });
      expect(t.metrics.retokenized_turns).toBe(0);
    }
    // the policy saw the recorded prompt tokens on every turn (token-in, no re-tokenization)
    expect(policy.requests.every((r) => (r.agentrl?.prompt_token_ids?.length ?? 0) > 0)).toBe(true);
    expect(stack.workers[0]?.sessionCount).toBe(0);
  });

  it("gives -0.2 to non-completed episodes and cancels sessions stopped by maxTurns", async () => {
    policy.behaviour.mode = "chatty";
    const config = configOf();
    await transport.queue("rollout-requests").send(JSON.stringify(requestsFor(config, 1)[0]));
    const chatty = await runUntil(config, 1);
    const t1 = await stored(chatty.ready[0]!.key);
    expect(t1).toMatchObject({ status: "agent validation failed", reward: -0.2, envReward: 0, turns: 1 });

    policy.behaviour.mode = "expert";
    const capped = configOf({ rollout: { maxTurns: 1 } });
    await transport.queue("rollout-requests").send(JSON.stringify(requestsFor(capped, 1)[1]));
    const limited = await runUntil(capped, 1);
    const t2 = await stored(limited.ready[0]!.key);
    expect(t2).toMatchObject({ status: "task limit reached", reward: -0.2, turns: 1 });
    await waitFor(() => stack.workers[0]?.sessionCount === 0, 5_000, "session cancelled");
  });

  it("retries infrastructure failures with a fresh session and never scores them", async () => {
    policy.behaviour.failFirst = 2;
    const config = configOf();
    await transport.queue("rollout-requests").send(JSON.stringify(requestsFor(config, 1)[0]));
    const { ready, summary } = await runUntil(config, 1);
    expect(summary).toMatchObject({ done: 1, infraRetries: 2, failed: 0 });
    const t = await stored(ready[0]!.key);
    expect(t).toMatchObject({ status: "completed", reward: 1, attempt: 2 });
    // each attempt's first turn asked for the same sampling seed: a retry replays, so load cannot change a seeded run
    const firstTurnSeeds = policy.requests.slice(0, 3).map((r) => r.seed);
    expect(firstTurnSeeds[0]).toEqual(expect.any(Number));
    expect(firstTurnSeeds).toEqual([firstTurnSeeds[0], firstTurnSeeds[0], firstTurnSeeds[0]]);
    await waitFor(() => stack.workers[0]?.sessionCount === 0, 5_000, "abandoned sessions cancelled");
  });

  it("retries an episode the environment ends outside the agent's control on a fresh session, never scoring it", async () => {
    const config = configOf();
    let starts = 0;
    let interacts = 0;
    const env: EnvApi = {
      // attempt 0: start_sample itself fails (task error); attempt 1: cancelled mid-way; attempt 2: real
      startSample: async (task, index, options) => {
        starts += 1;
        if (starts === 1)
          return { sessionId: -1, messages: [], tools: [], status: "task error", finish: true, reward: 0, metrics: {} };
        return stack.client.startSample(task, index, options);
      },
      interact: async (sessionId, message, options) => {
        interacts += 1;
        if (starts === 2 && interacts === 1) {
          await stack.client.cancel(sessionId);
          return { messages: [], finish: true, reward: 0, status: "cancelled", metrics: {} };
        }
        return stack.client.interact(sessionId, message, options);
      },
      cancel: (sessionId) => stack.client.cancel(sessionId),
    };
    await transport.queue("rollout-requests").send(JSON.stringify(requestsFor(config, 1)[0]));
    const { ready, summary } = await runUntil(config, 1, { env });
    expect(summary).toMatchObject({ done: 1, infraRetries: 2, dropped: 0, failed: 0 });
    const t = await stored(ready[0]!.key);
    expect(t).toMatchObject({ status: "completed", reward: 1, attempt: 2 });
  });

  it("waits for a free env slot (406) without using up attempts", async () => {
    const config = configOf({ rollout: { maxAttempts: 1 } });
    let refusals = 3;
    const env: EnvApi = {
      startSample: async (task, index, options) => {
        if (refusals-- > 0) throw new EnvCapacityError("start_sample: HTTP 406: no worker has a free slot", 406);
        return stack.client.startSample(task, index, options);
      },
      interact: (sessionId, message, options) => stack.client.interact(sessionId, message, options),
      cancel: (sessionId) => stack.client.cancel(sessionId),
    };
    await transport.queue("rollout-requests").send(JSON.stringify(requestsFor(config, 1)[0]));
    const { ready, summary } = await runUntil(config, 1, { env });
    expect(summary).toMatchObject({ done: 1, dropped: 0, capacityWaits: 3, infraRetries: 0 });
    expect(await stored(ready[0]!.key)).toMatchObject({ status: "completed", attempt: 0 });
  });

  it("after maxAttempts environment or infrastructure failures drops the member: MemberDropped, request deleted", async () => {
    policy.behaviour.failFirst = 1_000;
    const config = configOf({ rollout: { maxAttempts: 2 } });
    const [request] = requestsFor(config, 1);
    await transport.queue("rollout-requests").send(JSON.stringify(request));
    const requests = transport.queue("rollout-requests");
    const trajectories = transport.queue("trajectories");
    const { summary } = await runUntil(config, 0, {
      until: async () => (await trajectories.approximateDepth()).visible === 1,
    });
    expect(summary).toMatchObject({ dropped: 1, done: 0, failed: 0, infraRetries: 2 });
    const [message] = await trajectories.receive({ maxMessages: 1 });
    const dropped = MemberDropped.parse(JSON.parse(message!.body));
    expect(dropped).toMatchObject({
      trajectoryId: trajectoryIdOf(request!),
      groupId: request!.groupId,
      task: "example",
      attempts: 2,
    });
    expect(dropped.reason).toMatch(/failures in 2 attempts; last: PolicyUnavailableError/);
    expect(await requests.approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    expect(await requests.deadLetters()).toHaveLength(0);
    expect(await transport.store("trajectories").list("trajectories/")).toHaveLength(0); // nothing scored
  });

  it("records behaviour log-probs as rollout.behaviorLogprobs says: full, or sampled only where exact", async () => {
    const config = configOf({ rollout: { behaviorLogprobs: "full" } });
    const [first, second] = requestsFor(config, 1);
    await transport.queue("rollout-requests").send(JSON.stringify(first));
    const full = await stored((await runUntil(config, 1)).ready[0]!.key);
    expect(full.behaviorLogprobs).toBe("full");
    expect(full.fullLogprobs).toBeUndefined();
    expect(full.logprobs.filter((_, i) => full.lossMask[i] === 1).every((l) => l === -0.5)).toBe(true);

    // a server without sampled log-probs under a nucleus cannot be recorded exactly: never scored, dropped
    policy.behaviour.noSampled = true;
    const nucleus = configOf({ rollout: { topP: 0.9, maxAttempts: 1 } });
    await transport.queue("rollout-requests").send(JSON.stringify(second));
    const trajectories = transport.queue("trajectories");
    const before = (await trajectories.approximateDepth()).visible;
    const { summary } = await runUntil(nucleus, 0, {
      until: async () => (await trajectories.approximateDepth()).visible > before,
    });
    expect(summary.dropped).toBe(1);
    const bodies = (await trajectories.receive({ maxMessages: 10 })).map((m) => m.body).join("\n");
    expect(bodies).toMatch(/reports no sampled_logprobs; use a server that does or set rollout.behaviorLogprobs: full/);
  });

  it("sends bad bodies to the dead-letter queue with the failing field and keeps serving the rest", async () => {
    const config = configOf();
    const requests = transport.queue("rollout-requests");
    const [good] = requestsFor(config, 1);
    await requests.sendBatch([
      "not json",
      JSON.stringify({ ...good, groupSize: -1 }),
      JSON.stringify({ ...good, experimentId: "other" }),
      JSON.stringify(good),
    ]);
    const { ready } = await runUntil(config, 1, { until: async () => (await requests.deadLetters()).length === 3 });
    expect(ready).toHaveLength(1);
    const reasons = (await requests.deadLetters()).map((d) => d.reason).join("\n");
    expect(reasons).toMatch(/not valid JSON/);
    expect(reasons).toMatch(/groupSize/);
    expect(reasons).toMatch(/experimentId: "other" is not this role's experiment/);
  });

  it("poison requests: a path-like groupId dead-letters naming the field; a corrupt stored trajectory is re-run", async () => {
    const config = configOf();
    const requests = transport.queue("rollout-requests");
    const [good] = requestsFor(config, 1);
    if (!good) throw new Error("no request planned");
    await transport
      .store("trajectories")
      .put(trajectoryKey(good.experimentId, good.groupId, trajectoryIdOf(good)), "{");
    await requests.sendBatch([JSON.stringify({ ...good, groupId: "../../etc" }), JSON.stringify(good)]);
    const { ready, summary } = await runUntil(config, 1, {
      until: async () => (await requests.deadLetters()).length === 1,
    });
    expect(summary).toMatchObject({ done: 1, duplicates: 0 });
    expect((await stored(ready[0]?.key ?? "")).trajectoryId).toBe(trajectoryIdOf(good));
    expect((await requests.deadLetters())[0]?.reason).toMatch(/groupId: letters, digits/);
  });

  it("a redelivered request whose trajectory exists is re-announced, not re-run", async () => {
    const config = configOf();
    const [request] = requestsFor(config, 1);
    await transport.queue("rollout-requests").send(JSON.stringify(request));
    const first = await runUntil(config, 1);
    const calls = policy.requests.length;
    await transport.queue("rollout-requests").send(JSON.stringify(request));
    const second = await runUntil(config, 1);
    expect(second.summary).toMatchObject({ duplicates: 1, done: 0 });
    expect(policy.requests.length).toBe(calls);
    expect(second.ready[0]).toEqual(first.ready[0]);
  });

  it("cross-policy sampling mixes current and stale turns, seeded per trajectory", async () => {
    const stale = await startFakePolicy(codec, { version: 1 });
    try {
      const config = configOf({ rollout: { crossPolicy: { enabled: true, staleProbability: 0.5 } } });
      await transport.queue("rollout-requests").sendBatch(requestsFor(config, 3).map((r) => JSON.stringify(r)));
      const { ready } = await runUntil(config, 6, { stale: stale.url });
      const pools = new Set<string>();
      for (const event of ready) {
        const t = await stored(event.key);
        t.lossMask.forEach((m, i) => {
          if (!m) return;
          pools.add(t.policyPool[i]!);
          expect(t.policyVersion[i]).toBe(t.policyPool[i] === "stale" ? 1 : 3);
        });
        // one run of stale tokens per stale turn (turns are separated by observation tokens)
        const staleRuns = t.policyPool.filter((p, i) => p === "stale" && t.policyPool[i - 1] !== "stale").length;
        expect(t.metrics.stale_turns).toBe(staleRuns);
        expect(event.minVersion).toBe(Math.min(...t.policyVersion.filter((v) => v >= 0)));
      }
      expect([...pools].sort()).toEqual(["current", "stale"]);
      expect(stale.requests.length).toBeGreaterThan(0);
    } finally {
      await stale.close();
    }
  });

  it("on shutdown releases in-flight requests for redelivery and cancels their sessions", async () => {
    policy.behaviour.delayMs = 5_000;
    const config = configOf();
    const requests = transport.queue("rollout-requests");
    await requests.send(JSON.stringify(requestsFor(config, 1)[0]));
    const stop = new AbortController();
    const worker = runRolloutWorker(config, transport, {
      env: stack.client,
      pool: new PolicyPool(config.rollout, { current: policy.url }),
      codec,
      signal: stop.signal,
      waitSeconds: 0,
    });
    await waitFor(() => policy.requests.length === 1, 10_000, "first policy call");
    stop.abort();
    expect(await worker).toMatchObject({ released: 1, done: 0 });
    expect((await requests.approximateDepth()).visible).toBe(1);
    await waitFor(() => stack.workers[0]?.sessionCount === 0, 5_000, "session cancelled");
  });
});

describe("runEpisode with a fake environment", () => {
  it("propagates a lost session (worker died) as an infrastructure error after cancelling", async () => {
    const codec2 = codec;
    const cancelled: number[] = [];
    const env: EnvApi = {
      startSample: async () => ({
        sessionId: 7,
        messages: [{ role: "user", content: "What is 1 + 2 + 3?" }],
        tools: [],
        status: "running",
        finish: false,
        reward: 0,
        metrics: {},
      }),
      interact: async () => {
        throw new EnvSessionLostError("interact: HTTP 502: worker lost (worker_lost)", 502);
      },
      cancel: async (id: number) => {
        cancelled.push(id);
      },
    };
    const config = configOf();
    const policy = await startFakePolicy(codec2);
    try {
      const [request] = requestsFor(config, 1);
      await expect(
        runEpisode(
          request!,
          {
            env,
            policy: new (await import("../../shared/policy/client.ts")).PolicyClient(5_000),
            pool: new PolicyPool(config.rollout, { current: policy.url }),
            codec: codec2,
            rollout: config.rollout,
            seed: 1,
          },
          new AbortController().signal,
        ),
      ).rejects.toBeInstanceOf(EnvSessionLostError);
      expect(cancelled).toEqual([7]);
      expect(trajectoryIdOf(request!)).toBe(`${request!.groupId}-s0`);
    } finally {
      await policy.close();
    }
  });

  it("PolicyPool draws are deterministic by seed and follow the probabilities", () => {
    const config = configOf({
      rollout: {
        crossPolicy: {
          enabled: true,
          staleProbability: 0.25,
          external: [{ url: "http://127.0.0.1:1/v1", model: "ext", probability: 0.25 }],
        },
      },
    });
    const pool = new PolicyPool(config.rollout, { current: "http://c/v1", stale: "http://s/v1" });
    const draw = (seed: number) => {
      const random = seededRandom(seed);
      return Array.from({ length: 4_000 }, () => pool.draw(random).pool);
    };
    expect(draw(1)).toEqual(draw(1));
    const counts: Record<string, number> = {};
    for (const p of draw(2)) counts[p] = (counts[p] ?? 0) + 1;
    expect(counts.current! / 4_000).toBeCloseTo(0.5, 1);
    expect(counts.stale! / 4_000).toBeCloseTo(0.25, 1);
    expect(counts["external:ext"]! / 4_000).toBeCloseTo(0.25, 1);
    // without a stale server its share goes to current; disabled means current only
    expect(new PolicyPool(config.rollout, { current: "http://c/v1" }).members[0]?.probability).toBeCloseTo(0.75);
    const off = new PolicyPool(configOf().rollout, { current: "http://c/v1", stale: "http://s/v1" });
    expect(off.members.map((m) => m.endpoint.pool)).toEqual(["current"]);
  });
});
