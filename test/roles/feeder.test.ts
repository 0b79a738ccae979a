import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { feederCursorKey, inFlightGroupCap, plannedTasks, runFeeder } from "../../functions/feeder/feeder.ts";
import { groupIdOf, requestsOf, TaskMixPlan } from "../../functions/feeder/plan.ts";
import { type ExperimentConfigInput, parseConfig } from "../../shared/config/index.ts";
import { RolloutRequest } from "../../shared/protocol/messages.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { waitFor } from "../env/helpers.ts";
import { tempDir } from "../support/tmp.ts";

const tasks = [
  { name: "db", weight: 1, start: 0, count: 50 },
  { name: "kg", weight: 1, start: 0, count: 3 },
  { name: "os", weight: 1, start: 100, count: 20 },
];

describe("TaskMixPlan", () => {
  it("is deterministic by seed and differs across seeds", () => {
    const draw = (seed: number) => {
      const plan = new TaskMixPlan(tasks, seed);
      return Array.from({ length: 60 }, () => plan.next());
    };
    expect(draw(3)).toEqual(draw(3));
    expect(draw(3).map((g) => g.index)).not.toEqual(draw(4).map((g) => g.index));
  });

  it("interleaves equal-weight tasks one group at a time", () => {
    const plan = new TaskMixPlan(tasks, 0);
    expect(Array.from({ length: 9 }, () => plan.next().task)).toEqual([
      "db",
      "kg",
      "os",
      "db",
      "kg",
      "os",
      "db",
      "kg",
      "os",
    ]);
  });

  it("follows the weights exactly over each cycle (2:1 gives two db per kg)", () => {
    const plan = new TaskMixPlan(
      [
        { name: "db", weight: 2, start: 0, count: 10 },
        { name: "kg", weight: 1, start: 0, count: 10 },
      ],
      1,
    );
    for (let cycle = 0; cycle < 10; cycle++) {
      const names = [plan.next().task, plan.next().task, plan.next().task];
      expect(names.filter((n) => n === "db")).toHaveLength(2);
    }
  });

  it("replicates a small task set: every pass covers all its indices once, reshuffled", () => {
    const plan = new TaskMixPlan(tasks, 5);
    const kg = Array.from({ length: 90 }, () => plan.next()).filter((g) => g.task === "kg");
    const passes = [0, 1, 2, 3].map((p) => kg.slice(p * 3, p * 3 + 3).map((g) => g.index));
    for (const pass of passes) expect([...pass].sort()).toEqual([0, 1, 2]);
    expect(new Set(passes.map((p) => p.join(","))).size).toBeGreaterThan(1);
  });

  it("keeps indices inside each task's train range and group ids unique and stable", () => {
    const plan = new TaskMixPlan(tasks, 9);
    const groups = Array.from({ length: 300 }, () => plan.next());
    for (const g of groups.filter((x) => x.task === "os")) expect(g.index).toBeGreaterThanOrEqual(100);
    expect(new Set(groups.map((g) => g.groupId)).size).toBe(300);
    expect(groups[4]?.groupId).toBe(groupIdOf(4, groups[4]!.task, groups[4]!.index));
  });

  it("skipTo gives the same continuation as stepping", () => {
    const stepped = new TaskMixPlan(tasks, 2);
    for (let i = 0; i < 37; i++) stepped.next();
    const skipped = new TaskMixPlan(tasks, 2);
    skipped.skipTo(37);
    expect(skipped.next()).toEqual(stepped.next());
    expect(() => skipped.skipTo(3)).toThrow(/cannot go back/);
  });

  it("rejects an empty mix and non-positive weights", () => {
    expect(() => new TaskMixPlan([], 0)).toThrow(/empty/);
    expect(() => new TaskMixPlan([{ name: "db", weight: 0, start: 0, count: 1 }], 0)).toThrow(/weight of db/);
  });

  it("requestsOf yields n valid requests of one group", () => {
    const group = new TaskMixPlan(tasks, 0).next();
    const requests = requestsOf(group, "exp", 4);
    expect(requests.map((r) => r.sample)).toEqual([0, 1, 2, 3]);
    for (const r of requests) {
      expect(RolloutRequest.parse(r)).toEqual(r);
      expect(r.groupId).toBe(group.groupId);
      expect(r.groupSize).toBe(4);
    }
  });
});

describe("runFeeder on the local transport", () => {
  let dir: string;
  let transport: Transport;

  const config = (overrides: ExperimentConfigInput = {}) =>
    parseConfig({
      experimentId: "feed",
      seed: 11,
      tasks: { mix: [{ name: "db" }, { name: "kg", trainInstances: 4 }] },
      rollout: { groupSize: 2, maxInFlightBatches: 2 },
      trainer: { batchSize: 2, warmupFactor: 1.5 },
      ...overrides,
    });

  beforeEach(async () => {
    dir = tempDir("feeder-");
    transport = await createTransport(parseConfig({ transport: { localDir: dir } }).transport);
  });
  afterEach(async () => {
    await transport.close();
  });

  async function drain(max: number): Promise<RolloutRequest[]> {
    const queue = transport.queue("rollout-requests");
    const out: RolloutRequest[] = [];
    while (out.length < max) {
      const batch = await queue.receive({ maxMessages: Math.min(10, max - out.length) });
      if (batch.length === 0) break;
      for (const m of batch) {
        out.push(RolloutRequest.parse(JSON.parse(m.body)));
        await queue.delete(m.receiptHandle);
      }
    }
    return out;
  }

  it("keeps at most ~2 batches in flight and tops up as requests are consumed", async () => {
    const cfg = config();
    expect(inFlightGroupCap(cfg)).toBe(4); // max(2, 1.5) batches * 2 groups
    const queue = transport.queue("rollout-requests");
    const stop = new AbortController();
    const running = runFeeder(cfg, transport, { signal: stop.signal, pollMs: 5 });
    try {
      await waitFor(async () => (await queue.approximateDepth()).visible === 8, 5_000, "queue depth 8");
      await new Promise((r) => setTimeout(r, 100));
      expect((await queue.approximateDepth()).visible).toBe(8); // not one more while nothing is consumed
      // unconsumed trajectories count too: one pending TrajectoryReady holds back a slot
      await transport.queue("trajectories").send("{}");
      await drain(4);
      // outstanding = 4 requests + 1 trajectory = 5 of 8 -> room for floor(3 / 2) = 1 group
      await waitFor(async () => (await queue.approximateDepth()).visible === 6, 5_000, "queue depth 6");
      await new Promise((r) => setTimeout(r, 100));
      expect((await queue.approximateDepth()).visible).toBe(6);
    } finally {
      stop.abort();
    }
    const summary = await running;
    expect(summary).toMatchObject({ groupsSent: 5, requestsSent: 10 });
    expect(summary.cursor.nextSeq).toBe(5);
  });

  it("interleaves tasks in the queue and keeps the n samples of a group together", async () => {
    await runFeeder(config(), transport, { pollMs: 5, maxGroups: 4 });
    const requests = await drain(100);
    expect(requests.map((r) => `${r.task}:${r.sample}`)).toEqual([
      "db:0",
      "db:1",
      "kg:0",
      "kg:1",
      "db:0",
      "db:1",
      "kg:0",
      "kg:1",
    ]);
    for (const r of requests.filter((x) => x.task === "kg")) expect(r.index).toBeLessThan(4);
  });

  it("waits out a transport error that may pass and resumes from its cursor; any other error ends it", async () => {
    const cfg = config();
    const requests = transport.queue("rollout-requests");
    const sendBatch = requests.sendBatch.bind(requests);
    let calls = 0;
    // The first send fails as a connection the server did not accept in time does (the SDK's TimeoutError).
    requests.sendBatch = async (bodies) => {
      calls += 1;
      if (calls === 1)
        throw Object.assign(new Error("socket did not connect within 10000 ms"), { name: "TimeoutError" });
      return sendBatch(bodies);
    };
    const realQueue = transport.queue.bind(transport);
    transport.queue = (name) => (name === "rollout-requests" ? requests : realQueue(name));
    const summary = await runFeeder(cfg, transport, { pollMs: 5, maxGroups: 4 });
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(summary.cursor.nextSeq).toBe(4);
    const plan = new TaskMixPlan(plannedTasks(cfg), cfg.seed);
    const expected = Array.from({ length: 4 }, () => plan.next().groupId);
    // every planned group was sent once, in order: the failed send resumed from the saved cursor
    expect((await drain(100)).filter((r) => r.sample === 0).map((r) => r.groupId)).toEqual(expected);

    requests.sendBatch = async () => {
      throw new Error("not a transport error");
    };
    await expect(runFeeder(cfg, transport, { pollMs: 5, maxGroups: 6 })).rejects.toThrow("not a transport error");
  });

  it("stops, not fails, when a transport call fails after it was asked to stop", async () => {
    const cfg = config();
    const requests = transport.queue("rollout-requests");
    const stop = new AbortController();
    // The stop signal arrives while a send is under way, and that send then fails as a connection
    // the server did not accept in time does.
    requests.sendBatch = async () => {
      stop.abort();
      throw Object.assign(new Error("socket did not connect within 10000 ms"), { name: "TimeoutError" });
    };
    const realQueue = transport.queue.bind(transport);
    transport.queue = (name) => (name === "rollout-requests" ? requests : realQueue(name));
    const summary = await runFeeder(cfg, transport, { signal: stop.signal, pollMs: 5 });
    expect(summary).toMatchObject({ groupsSent: 0, requestsSent: 0 });
    expect(summary.cursor.nextSeq).toBe(0);

    // Any other error still ends it as a failure, stopping or not.
    const again = new AbortController();
    requests.sendBatch = async () => {
      again.abort();
      throw new Error("not a transport error");
    };
    await expect(runFeeder(cfg, transport, { signal: again.signal, pollMs: 5 })).rejects.toThrow(
      "not a transport error",
    );
  });

  it("resumes from its cursor: a restart continues the same deterministic sequence", async () => {
    const cfg = config();
    await runFeeder(cfg, transport, { pollMs: 5, maxGroups: 3 });
    const first = await drain(100);
    await runFeeder(cfg, transport, { pollMs: 5, maxGroups: 4 });
    const second = await drain(100);
    const plan = new TaskMixPlan(plannedTasks(cfg), cfg.seed);
    const expected = Array.from({ length: 4 }, () => plan.next().groupId);
    expect([...first, ...second].filter((r) => r.sample === 0).map((r) => r.groupId)).toEqual(expected);
    const cursor = JSON.parse((await transport.store("trajectories").getText(feederCursorKey("feed"))) ?? "{}");
    expect(cursor.nextSeq).toBe(4);
  });

  it("sync mode sends one batch per published policy version", async () => {
    let version = 0;
    const cfg = config({ trainer: { batchSize: 2, mode: "sync" } });
    const queue = transport.queue("rollout-requests");
    const stop = new AbortController();
    const running = runFeeder(cfg, transport, { signal: stop.signal, pollMs: 5, latestVersion: async () => version });
    try {
      await waitFor(async () => (await queue.approximateDepth()).visible === 4, 5_000, "queue depth 4");
      // consumed, but no new version yet: nothing more; each request is pinned to the version it was fed for
      expect((await drain(4)).map((r) => r.policyVersion)).toEqual([0, 0, 0, 0]);
      await new Promise((r) => setTimeout(r, 100));
      expect((await queue.approximateDepth()).visible).toBe(0);
      version = 1;
      await waitFor(async () => (await queue.approximateDepth()).visible === 4, 5_000, "queue depth 4");
      await new Promise((r) => setTimeout(r, 100));
      expect((await queue.approximateDepth()).visible).toBe(4);
      expect((await drain(4)).map((r) => r.policyVersion)).toEqual([1, 1, 1, 1]);
    } finally {
      stop.abort();
    }
    const summary = await running;
    expect(summary.cursor).toMatchObject({ batchesFed: 2, lastFedVersion: 1, nextSeq: 4 });
  });

  it("sync mode without a version source is refused", async () => {
    await expect(runFeeder(config({ trainer: { mode: "sync" } }), transport, { maxGroups: 1 })).rejects.toThrow(
      /latestVersion/,
    );
  });
});
