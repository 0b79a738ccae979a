import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { requestsOf, TaskMixPlan } from "../../functions/feeder/plan.ts";
import { rolloutDepsFromUrls, syncedVersionWatch } from "../../functions/rollout/index.ts";
import { PolicyPool } from "../../functions/rollout/pool.ts";
import { runRolloutWorker } from "../../functions/rollout/worker.ts";
import type { ChatCodec } from "../../shared/chat/index.ts";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { createApp, listen } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { importHfFolder } from "../../shared/model/hf/index.ts";
import { initBackend } from "../../shared/model/index.ts";
import { PolicyClient, PolicyUnavailableError } from "../../shared/policy/client.ts";
import { type EngineVersionWatch, readEngineRecord, withEngineRecord } from "../../shared/policy/engine-sync.ts";
import { Trajectory, type TrajectoryReady } from "../../shared/protocol/messages.ts";
import { ChatCompletionRequest, POLICY_VERSION_HEADER } from "../../shared/protocol/openai.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { restrictTransport } from "../../shared/transport/restricted.ts";
import type { ObjectStore, Transport } from "../../shared/transport/types.ts";
import { hfPublisher } from "../../trainer-image/trainer/hf-publish.ts";
import { runTrainer } from "../../trainer-image/trainer/trainer.ts";
import { type Stack, startStack, waitFor } from "../env/helpers.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { tempDir } from "../support/tmp.ts";
import { exampleCodec, expertTurn } from "./rolloutHelpers.ts";

/**
 * rollout.versionSource: sync end to end, on CPU with no network: the trainer's syncer (hfPublisher)
 * exports each version, writes engines/<id>.json around a vLLM-style reload of a fake engine, and
 * the rollout worker labels the engine's answers, which carry no version, by that record.
 */

/** The log-prob the fake engine reports for every token made with weights `id` (a sha256 of its safetensors). */
function logprobOf(weights: string | undefined): number {
  return weights === undefined ? -9 : -(1 + (Number.parseInt(weights.slice(0, 6), 16) % 997)) / 1000;
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

interface FakeVllm {
  readonly url: string;
  /** Chat requests received. */
  requests: number;
  /** Weights at the request's arrival and when it was answered: a reload in between mixes them. */
  readonly answers: Array<{ start: string | undefined; end: string | undefined }>;
  /** Weights served now (sha256 of model.safetensors at the last reload). */
  loaded: string | undefined;
  delayMs: number;
  reloadDelayMs: number;
  /** Answer the next reloads with HTTP 500, weights unchanged. */
  failReloads: number;
  /** When set, the next chat request waits for it (after calling `arrived`). */
  hold: { arrived: () => void; release: Promise<void> } | undefined;
  /** Runs while each answer is being made (after `hold`). */
  duringAnswer: (() => Promise<unknown>) | undefined;
  /** Sent as x-policy-version (a real vLLM sends none). */
  versionHeader: string | undefined;
  close(): Promise<void>;
}

/**
 * A vLLM-shaped engine: /v1/chat/completions in the vLLM dialect with no version anywhere (no
 * header, a plain model name), and the dev-mode /collective_rpc reload_weights that re-reads the
 * folder it serves. Its answers play the example task's expert; each token's log-prob names the
 * weights it was made with, the first half at the request's arrival, the second half at its answer.
 */
async function startFakeVllm(codec: ChatCodec, modelDir: string): Promise<FakeVllm> {
  const app = createApp(createLogger({ role: "fake-vllm" }));
  const engine: FakeVllm = {
    url: "",
    requests: 0,
    answers: [],
    loaded: undefined,
    delayMs: 0,
    reloadDelayMs: 0,
    failReloads: 0,
    hold: undefined,
    duringAnswer: undefined,
    versionHeader: undefined,
    close: async () => {},
  };
  app.post("/collective_rpc", async (c) => {
    const body = (await c.req.json()) as { method?: string };
    if (body.method !== "reload_weights") return c.json({ error: "unknown method" }, 400);
    if (engine.reloadDelayMs > 0) await new Promise((r) => setTimeout(r, engine.reloadDelayMs));
    if (engine.failReloads > 0) {
      engine.failReloads -= 1;
      return c.json({ error: "CUDA out of memory" }, 500);
    }
    engine.loaded = sha256(readFileSync(join(modelDir, "model.safetensors")));
    return c.json({ results: [null] });
  });
  app.post("/v1/chat/completions", async (c) => {
    const body = ChatCompletionRequest.parse(await c.req.json());
    engine.requests += 1;
    const start = engine.loaded;
    const hold = engine.hold;
    if (hold) {
      engine.hold = undefined;
      hold.arrived();
      await hold.release;
    }
    await engine.duringAnswer?.();
    if (engine.delayMs > 0) await new Promise((r) => setTimeout(r, engine.delayMs));
    const end = engine.loaded;
    engine.answers.push({ start, end });
    const message = expertTurn(body.messages);
    const ids = codec.assistantTokens(body.messages, message, body.tools);
    const half = Math.ceil(ids.length / 2);
    if (engine.versionHeader !== undefined) c.header(POLICY_VERSION_HEADER, engine.versionHeader);
    return c.json({
      id: `cmpl-${engine.requests}`,
      object: "chat.completion",
      created: 0,
      model: "Qwen2.5-0.5B-Instruct",
      prompt_token_ids: codec.promptTokens(body.messages, body.tools),
      choices: [
        {
          index: 0,
          message,
          finish_reason: "tool_calls",
          token_ids: ids,
          logprobs: {
            content: ids.map((id, i) => ({
              token: `t${id}`,
              logprob: logprobOf(i < half ? start : end),
              bytes: null,
            })),
          },
        },
      ],
      usage: { prompt_tokens: 0, completion_tokens: ids.length, total_tokens: ids.length },
    });
  });
  const server = await listen(app);
  return Object.assign(engine, { url: server.url, close: () => server.close() });
}

const ENGINE_ID = "fake-vllm";

function configOf(engineUrl: string, modelDir: string): ExperimentConfig {
  return parseConfig({
    experimentId: "vsync",
    seed: 3,
    tasks: { mix: [{ name: "example", trainInstances: 50 }] },
    policy: {
      exportHf: true,
      syncEngines: [{ id: ENGINE_ID, url: engineUrl, dialect: "vllm", modelDir }],
    },
    rollout: {
      groupSize: 2,
      concurrency: 4,
      retryBackoffMs: 1,
      versionSource: "sync",
      syncEngine: ENGINE_ID,
      syncRetries: 3,
      crossPolicy: { enabled: false },
    },
  });
}

let codec: ChatCodec;
beforeAll(async () => {
  await initBackend("wasm");
  codec = await exampleCodec();
});

/** A checkpoint store holding three tiny Qwen2 versions with different weights, an engine, a syncer. */
async function setUp(versions = 3) {
  const work = tempDir("agentrl-vllm-sync-");
  const transport = await createTransport(
    parseConfig({ transport: { localDir: join(work, "transport"), maxReceiveCount: 2 } }).transport,
  );
  for (let v = 0; v < versions; v++) {
    const dir = join(work, `hf-${v}`);
    writeTinyHfFolder(dir, { seed: 11 + v });
    await importHfFolder(dir, transport.store("checkpoints"), { version: v });
  }
  const modelDir = join(work, "vllm-model");
  const engine = await startFakeVllm(codec, modelDir);
  const config = configOf(engine.url, modelDir);
  // Each role through its own row of the role-access table: the trainer writes engines/, the rollout reads it.
  const trainerCheckpoints = restrictTransport(transport, "trainer").store("checkpoints");
  const rollout = restrictTransport(transport, "rollout");
  const logLines: string[] = [];
  const log = createLogger({ role: "test" }, { write: (line: string) => logLines.push(line) });
  const syncer = hfPublisher(config.policy, { log });
  /** version → the log-prob the engine reports for that version's weights */
  const weightsOf = async (v: number) =>
    sha256((await transport.store("checkpoints").get(`policies/v${v}/hf/model.safetensors`)) as Uint8Array);
  return { work, transport, engine, config, trainerCheckpoints, rollout, syncer, log, logLines, weightsOf };
}

function endpointOf(config: ExperimentConfig, engineUrl: string, versionSync: EngineVersionWatch) {
  return new PolicyPool(config.rollout, {
    current: `${engineUrl}/v1`,
    dialect: "vllm",
    versionSync,
  }).draw(() => 0);
}

const ASK = {
  messages: [{ role: "user" as const, content: "Add 2, 3 and 4." }],
  tools: [],
  temperature: 0.8,
  topP: 1,
  maxTokens: 64,
};

describe("rollout.versionSource: sync with a vLLM-dialect engine that reports no version", () => {
  let stack: Stack;
  const cleanups: Array<() => Promise<void>> = [];
  beforeAll(async () => {
    stack = await startStack([{ concurrency: 8 }]);
  });
  afterAll(async () => {
    await stack.close();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0)) await cleanup();
  });

  it("(a) the rollout worker labels every token with the version whose weights made it, across reloads", async () => {
    const s = await setUp();
    cleanups.push(
      () => s.engine.close(),
      () => s.transport.close(),
    );
    s.engine.delayMs = 30;
    // At trainer start the engine is synced to the version training continues from (v0 here).
    const started = await s.syncer.resync(s.trainerCheckpoints, 0);
    expect(started.engines).toEqual([{ id: ENGINE_ID, url: s.engine.url, dialect: "vllm", loaded: true }]);
    expect(await readEngineRecord(s.transport.store("checkpoints"), ENGINE_ID)).toMatchObject({
      version: 0,
      state: "ready",
      seq: 2,
    });

    const watch = (await syncedVersionWatch(s.config, s.rollout.store("checkpoints"), {
      log: s.log,
    })) as EngineVersionWatch;
    const plan = new TaskMixPlan([{ name: "example", weight: 1, start: 0, count: 50 }], s.config.seed);
    // Requests come from the feeder's side (the rollout role may not send them): the unrestricted transport.
    const send = (groups: number) =>
      s.transport.queue("rollout-requests").sendBatch(
        Array.from({ length: groups }, () => plan.next())
          .flatMap((g) => requestsOf(g, s.config.experimentId, s.config.rollout.groupSize))
          .map((r) => JSON.stringify(r)),
      );
    const ready: TrajectoryReady[] = [];
    const stop = new AbortController();
    const worker = runRolloutWorker(s.config, s.rollout, {
      env: stack.client,
      pool: new PolicyPool(s.config.rollout, { current: `${s.engine.url}/v1`, dialect: "vllm", versionSync: watch }),
      codec,
      signal: stop.signal,
      waitSeconds: 0,
      onReady: (r) => ready.push(r),
    });
    try {
      await send(2);
      await waitFor(() => ready.length >= 2, 30_000, "2 trajectories at v0");
      await s.syncer.publish(s.trainerCheckpoints, 1); // reloads while the other two episodes run
      await waitFor(() => ready.length >= 4, 30_000, "4 trajectories");
      await send(2);
      await waitFor(() => ready.length >= 5, 30_000, "5 trajectories");
      await s.syncer.publish(s.trainerCheckpoints, 2);
      await send(1);
      await waitFor(() => ready.length >= 10, 30_000, "10 trajectories");
    } finally {
      stop.abort();
    }
    const summary = await worker;
    expect(summary).toMatchObject({ done: 10, failed: 0, dropped: 0 });

    const weights = new Map<number, string>();
    for (const v of [0, 1, 2]) weights.set(v, await s.weightsOf(v));
    expect(new Set([...weights.values()].map(logprobOf)).size).toBe(3); // the log-prob tells the versions apart
    const labels = new Set<number>();
    let discardedInTrajectories = 0;
    for (const event of ready) {
      const t = Trajectory.parse(JSON.parse((await s.transport.store("trajectories").getText(event.key)) as string));
      expect(t.status).toBe("completed");
      discardedInTrajectories += t.metrics.version_discards ?? 0;
      t.lossMask.forEach((m, i) => {
        if (m === 0) return;
        const version = t.policyVersion[i] as number;
        labels.add(version);
        // the label names the weights that made this token
        expect(t.logprobs[i], `${t.trajectoryId} token ${i} labelled v${version}`).toBe(
          logprobOf(weights.get(version)),
        );
      });
      expect(event.minVersion).toBeGreaterThanOrEqual(0);
    }
    expect([...labels].sort()).toEqual([0, 1, 2]);
    // every answer the engine mixed across a reload was discarded, none reached a trajectory
    const mixed = s.engine.answers.filter((a) => a.start !== a.end).length;
    expect(watch.discarded).toBeGreaterThanOrEqual(mixed);
    expect(summary.versionDiscards).toBe(discardedInTrajectories);
    expect(await readEngineRecord(s.transport.store("checkpoints"), ENGINE_ID)).toMatchObject({
      version: 2,
      state: "ready",
      seq: 6,
    });
  }, 120_000);

  it("(b) an answer that straddles a reload is discarded and asked again, then labelled with the new version", async () => {
    const s = await setUp(2);
    cleanups.push(
      () => s.engine.close(),
      () => s.transport.close(),
    );
    await s.syncer.resync(s.trainerCheckpoints, 0);
    const watch = (await syncedVersionWatch(s.config, s.rollout.store("checkpoints"), {
      log: s.log,
    })) as EngineVersionWatch;
    const endpoint = endpointOf(s.config, s.engine.url, watch);
    const client = new PolicyClient(30_000);

    // The first request waits inside the engine while the trainer publishes v1 and the engine reloads.
    let arrived!: () => void;
    const arrival = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    let release!: () => void;
    s.engine.hold = {
      arrived,
      release: new Promise<void>((resolve) => {
        release = resolve;
      }),
    };
    const generation = client.generate(endpoint, ASK);
    await arrival;
    const published = await s.syncer.publish(s.trainerCheckpoints, 1);
    expect(published.engines[0]?.loaded).toBe(true);
    release();
    const answer = await generation;

    const [v0, v1] = [await s.weightsOf(0), await s.weightsOf(1)];
    // the engine answered twice: first half v0, second half v1; then all v1
    expect(s.engine.answers).toEqual([
      { start: v0, end: v1 },
      { start: v1, end: v1 },
    ]);
    const trace = answer.trace!;
    expect(trace.policy_versions.every((v) => v === 1)).toBe(true);
    expect(trace.logprobs.every((lp) => lp === logprobOf(v1))).toBe(true);
    expect(answer.versionDiscards).toBe(1);
    expect(watch.discarded).toBe(1);
    const warned = s.logLines.map((line) => JSON.parse(line) as { msg: string; before?: unknown });
    expect(warned.filter((l) => /straddled a weight reload/.test(l.msg))).toEqual([
      expect.objectContaining({ before: { version: 0, seq: 2 } }),
    ]);

    // A record that moves during every answer: after rollout.syncRetries re-asks the turn fails as
    // unavailable (the worker retries the episode), never labelled.
    const strict = parseConfig({
      ...s.config,
      rollout: { ...s.config.rollout, syncRetries: 1 },
    });
    const moving = (await syncedVersionWatch(strict, s.rollout.store("checkpoints"))) as EngineVersionWatch;
    s.engine.duringAnswer = () => withEngineRecord(s.trainerCheckpoints, ENGINE_ID, 1, async () => {});
    const asked = s.engine.requests;
    await expect(client.generate(endpointOf(strict, s.engine.url, moving), ASK)).rejects.toThrow(
      /2 answers in a row straddled a weight reload of engine fake-vllm \(rollout\.syncRetries 1\)/,
    );
    expect(s.engine.requests - asked).toBe(2);
    expect(moving.discarded).toBe(2);

    // An answer whose own header contradicts a confirmed record: the record names another engine.
    s.engine.duringAnswer = undefined;
    s.engine.versionHeader = "7";
    await expect(client.generate(endpoint, ASK)).rejects.toThrow(
      /the answer names version 7 but engine fake-vllm's sync record says v1: does rollout\.syncEngine name the engine behind this URL\?/,
    );
    s.engine.versionHeader = "1";
    expect((await client.generate(endpoint, ASK)).trace?.policy_versions[0]).toBe(1);
  }, 60_000);

  it("waits while the engine loads, and attributes nothing while a failed load leaves the record at loading", async () => {
    const s = await setUp(3);
    cleanups.push(
      () => s.engine.close(),
      () => s.transport.close(),
    );
    await s.syncer.resync(s.trainerCheckpoints, 0);
    const watch = (await syncedVersionWatch(s.config, s.rollout.store("checkpoints"))) as EngineVersionWatch;
    const endpoint = endpointOf(s.config, s.engine.url, watch);

    // A slow load. A worker that has read `loading` waits for `ready` instead of sending; one whose
    // newest read was the earlier `ready` sends, and that answer is discarded (the price of not
    // reading afresh before every request).
    s.engine.reloadDelayMs = 400;
    const publishing = s.syncer.publish(s.trainerCheckpoints, 1);
    await waitFor(
      async () => (await readEngineRecord(s.transport.store("checkpoints"), ENGINE_ID))?.state === "loading",
      10_000,
      "loading record",
      5,
    );
    const late = (await syncedVersionWatch(s.config, s.rollout.store("checkpoints"))) as EngineVersionWatch;
    let before = s.engine.requests;
    const answer = await new PolicyClient(30_000).generate(endpointOf(s.config, s.engine.url, late), ASK);
    await publishing;
    expect(s.engine.requests - before).toBe(1);
    expect(answer.versionDiscards).toBeUndefined();
    expect(answer.trace?.policy_versions.every((v) => v === 1)).toBe(true);
    expect(answer.trace?.logprobs[0]).toBe(logprobOf(await s.weightsOf(1)));
    before = s.engine.requests;
    const cached = await new PolicyClient(30_000).generate(endpoint, ASK);
    expect(s.engine.requests - before).toBe(2);
    expect(cached.versionDiscards).toBe(1);
    expect(cached.trace?.policy_versions.every((v) => v === 1)).toBe(true);

    // A failed load: the engine's state is unknown, the record stays `loading`, no answer is taken.
    s.engine.reloadDelayMs = 0;
    s.engine.failReloads = 1;
    const failed = await s.syncer.publish(s.trainerCheckpoints, 2);
    expect(failed.engines[0]).toMatchObject({ loaded: false, error: expect.stringMatching(/HTTP 500/) });
    expect(await readEngineRecord(s.transport.store("checkpoints"), ENGINE_ID)).toMatchObject({
      version: 2,
      state: "loading",
      seq: 5,
    });
    const sent = s.engine.requests;
    await expect(new PolicyClient(600).generate(endpoint, ASK)).rejects.toThrow(PolicyUnavailableError);
    await expect(new PolicyClient(600).generate(endpoint, ASK)).rejects.toThrow(
      /engines\/fake-vllm\.json still says loading v2 after 600 ms/,
    );
    // the first call still held the earlier `ready`: it sent once, saw `loading` after, and gave up
    // waiting; the second read `loading` before sending and sent nothing
    expect(s.engine.requests - sent).toBe(1);
    // The next load that succeeds makes the pool usable again.
    await s.syncer.publish(s.trainerCheckpoints, 2);
    const again = await new PolicyClient(30_000).generate(endpoint, ASK);
    expect(again.trace?.policy_versions.every((v) => v === 2)).toBe(true);
    expect(again.trace?.logprobs[0]).toBe(logprobOf(await s.weightsOf(2)));
  }, 60_000);

  it("(c) without the engine's sync record the worker refuses the pool, naming the config fields", async () => {
    const s = await setUp(1);
    cleanups.push(
      () => s.engine.close(),
      () => s.transport.close(),
    );
    // no trainer has synced the engine: engines/fake-vllm.json does not exist
    const refused = rolloutDepsFromUrls(
      s.config,
      s.rollout,
      { controller: stack.controller.url, current: `${s.engine.url}/v1`, dialect: "vllm" },
      undefined,
      {},
      { recordWaitMs: 300 },
    );
    await expect(refused).rejects.toThrow(
      /rollout\.versionSource is "sync" but engines\/fake-vllm\.json did not appear in the checkpoint store within 300 ms: .*policy\.syncEngines\[\]\.id is "fake-vllm" \(rollout\.syncEngine\)/,
    );
    expect(s.engine.requests).toBe(0);
    expect(existsSync(join(s.work, "vllm-model"))).toBe(false);

    // Once synced, the same call builds the pool with the record's watch on the current endpoint.
    await s.syncer.resync(s.trainerCheckpoints, 0);
    const deps = await rolloutDepsFromUrls(
      s.config,
      s.rollout,
      { controller: stack.controller.url, current: `${s.engine.url}/v1`, dialect: "vllm" },
      undefined,
      {},
      { recordWaitMs: 300 },
    );
    expect(deps.pool.draw(() => 0).versionSync?.engineId).toBe(ENGINE_ID);
    // Our own server labels its own tokens: sync with the agentrl dialect is refused.
    expect(
      () =>
        new PolicyPool(s.config.rollout, {
          current: `${s.engine.url}/v1`,
          versionSync: deps.pool.draw(() => 0).versionSync!,
        }),
    ).toThrow(/rollout\.versionSource "sync" labels vLLM-dialect answers/);
  }, 60_000);
});

describe("a trainer starting with policy.syncEngines", () => {
  it("brings each engine and its record to the version it trains from before its first step", async () => {
    const s = await setUp(2);
    try {
      expect(await readEngineRecord(s.transport.store("checkpoints"), ENGINE_ID)).toBeUndefined();
      const stop = new AbortController();
      stop.abort(); // start, sync, and stop before any step
      const summary = await runTrainer(s.config, restrictTransport(s.transport, "trainer"), {
        signal: stop.signal,
        waitSeconds: 0,
        log: s.log,
      });
      expect(summary).toMatchObject({ version: 1, stepsThisRun: 0 });
      expect(await readEngineRecord(s.transport.store("checkpoints"), ENGINE_ID)).toMatchObject({
        version: 1,
        state: "ready",
      });
      expect(s.engine.loaded).toBe(await s.weightsOf(1));
    } finally {
      await s.engine.close();
      await s.transport.close();
    }
  }, 60_000);
});

describe("the trainer and rollout rows for engines/", () => {
  it("let the trainer write and read engine records, the rollout only read them", async () => {
    const transport: Transport = await createTransport(
      parseConfig({ transport: { localDir: tempDir("agentrl-engines-grant-") } }).transport,
    );
    const refused: string[] = [];
    const onViolation = (error: Error) => refused.push(error.message);
    const trainer: ObjectStore = restrictTransport(transport, "trainer", { onViolation }).store("checkpoints");
    const rollout: ObjectStore = restrictTransport(transport, "rollout", { onViolation }).store("checkpoints");
    const policy: ObjectStore = restrictTransport(transport, "policy", { onViolation }).store("checkpoints");
    try {
      await trainer.put("engines/e.json", "{}");
      expect(await trainer.getText("engines/e.json")).toBe("{}");
      expect(await rollout.getText("engines/e.json")).toBe("{}");
      await expect(rollout.put("engines/e.json", "{}")).rejects.toThrow(
        "role rollout may not put (write) checkpoints store key engines/e.json",
      );
      await expect(policy.getText("engines/e.json")).rejects.toThrow(/role policy may not get \(read\)/);
      expect(refused).toHaveLength(2);
    } finally {
      await transport.close();
    }
  });
});
