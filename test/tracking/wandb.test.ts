import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../shared/config/index.ts";
import { flattenParams, openTrackers, readTrackerLinks } from "../../shared/tracking/index.ts";
import { fileStreamChunks, WANDB_LIMITS, wandbConfig, wandbHistogram, wandbKey } from "../../shared/tracking/wandb.ts";
import { tempDir } from "../support/tmp.ts";
import { startWandbStub, type WandbStub } from "../support/wandbStub.ts";

/**
 * The W&B sink against a stand-in server on 127.0.0.1 that enforces the shapes W&B's own client
 * sends and the documented limits (test/support/wandbStub.ts); every test ends with no recorded
 * violation. No real W&B server was run here.
 */
const KEY = "local-0123456789abcdef0123456789abcdef01234567";
let stub: WandbStub;
beforeAll(async () => {
  stub = await startWandbStub(KEY);
});
afterAll(() => stub.close());

function configFor(project: string, extra: Record<string, unknown> = {}) {
  return parseConfig({
    experimentId: "wandb-sink",
    tracking: {
      tensorboard: { enabled: false },
      wandb: { project, baseUrl: `${stub.url}/` },
      retryBaseSeconds: 0.01,
      finishSeconds: 60,
      ...extra,
    },
  });
}

const runsOf = (project: string) => [...stub.runs.values()].filter((r) => r.project === project);
/** Lets the tracker's pump take what is queued, so the next records form a batch of their own. */
const nextTick = () => new Promise((resolve) => setImmediate(resolve));

describe("W&B sink", () => {
  it("makes the run, sends config and commit, one history line per step (a step's scalars and histograms merged), the summary with the evaluation, and completes it", async () => {
    const runFolder = tempDir("agentrl-wandb-");
    const warnings: string[] = [];
    const config = configFor("agentrl-a");
    const tracker = openTrackers(config.tracking, {
      runFolder,
      runName: config.experimentId,
      env: { WANDB_API_KEY: KEY },
      warn: (m) => warnings.push(m),
    });
    tracker.params(flattenParams(config), { "mlflow.source.git.commit": "abc1234" });
    for (let step = 1; step <= 5; step += 1) {
      tracker.scalars(step, { "loss/total": 1 / step, "odd key": step, _private: 1, "bad/nan": Number.NaN });
      await nextTick(); // the histograms of a step may come in a later batch than its scalars
      tracker.histogram(step, "advantages", [-1, 0, step]);
    }
    await tracker.finish("FINISHED");
    // the closing evaluation, as the pipeline logs it: a tracker of its own, at the last trainer step
    const closing = openTrackers(config.tracking, {
      runFolder,
      runName: config.experimentId,
      env: { WANDB_API_KEY: KEY },
      warn: (m) => warnings.push(m),
    });
    closing.text(5, "evaluation", "| policy | db |\n|---|---|\n| v5 | 5.0 |");
    closing.scalars(5, { "eval/db/success": 5, "eval/avg/success": 5 });
    await closing.finish("FINISHED");

    expect(stub.violations).toEqual([]);
    expect(warnings).toEqual([]);
    expect(tracker.dropped).toBe(0);
    const [run, ...others] = runsOf("agentrl-a");
    expect(others).toEqual([]);
    expect(run?.entity).toBe("stub-user"); // the key's default entity: the config names none
    expect(run?.displayName).toBe("wandb-sink");
    expect(run?.commit).toBe("abc1234");
    expect(run?.config.policy?.value).toMatchObject({ model: { dModel: String(config.policy.model.dModel) } });
    expect(run?.config.tasks?.value).toMatchObject({ mix: { 0: { name: config.tasks.mix[0]?.name } } });
    expect(run?.history.map((row) => row._step)).toEqual([1, 2, 3, 4, 5]);
    for (const row of run?.history ?? []) {
      expect(row["loss/total"]).toBe(1 / row._step);
      expect(row.odd_key).toBe(row._step);
      expect(row.u_private).toBe(1);
      expect(row).not.toHaveProperty("bad/nan");
      expect(row.advantages).toMatchObject({ _type: "histogram" });
      expect((row.advantages as { values: number[] }).values).toHaveLength(WANDB_LIMITS.histogramBins);
    }
    // step 5's row was sent: the evaluation's values for it are the run's summary
    expect(run?.summary).toMatchObject({
      "loss/total": 0.2,
      _step: 5,
      evaluation: expect.stringContaining("| v5 |"),
      "eval/avg/success": 5,
    });
    expect(run?.complete).toBe(true);
    expect(run?.exitcode).toBe(0);
    expect(stub.authorizations.every((a) => a === `Basic ${Buffer.from(`api:${KEY}`).toString("base64")}`)).toBe(true);
    const links = readTrackerLinks(runFolder);
    expect(links.wandb).toEqual({
      baseUrl: stub.url,
      entity: "stub-user",
      project: "agentrl-a",
      runId: run?.name,
      url: `${stub.url}/stub-user/agentrl-a/runs/${run?.name}`,
    });
    expect(tracker.links()).toEqual({ wandb: links.wandb?.url });
  });

  it("splits a history bigger than one request into several, each within W&B's limits", async () => {
    const config = configFor("agentrl-big", { queueLimit: 10_000 });
    const tracker = openTrackers(config.tracking, {
      runFolder: tempDir("agentrl-wandb-"),
      runName: "big",
      env: { WANDB_API_KEY: KEY },
      warn: () => {},
    });
    // 150 steps of 2500 keys: about 12 MB of history, more than one 10 MiB request
    const keys = Array.from({ length: 2500 }, (_, i) => `task/t${i}/success`);
    for (let step = 1; step <= 150; step += 1)
      tracker.scalars(step, Object.fromEntries(keys.map((k, i) => [k, (i * step) / 7])));
    await tracker.finish("FINISHED");
    expect(stub.violations).toEqual([]);
    expect(tracker.dropped).toBe(0);
    const [run] = runsOf("agentrl-big");
    expect(run?.history).toHaveLength(150);
    expect(run?.history.at(-1)?.["task/t2499/success"]).toBe((2499 * 150) / 7);
    expect(run?.requests).toBeGreaterThanOrEqual(3); // at least two history requests, then the end
  });

  it("retries a server briefly away, continues the same run after a restart without repeating its steps, and ends a failed run with exit code 1", async () => {
    const runFolder = tempDir("agentrl-wandb-");
    const config = configFor("agentrl-b");
    const env = { WANDB_API_KEY: KEY };
    const first = openTrackers(config.tracking, { runFolder, runName: "r", env, warn: () => {} });
    stub.failNext(2);
    for (const step of [1, 2, 3]) first.scalars(step, { "loss/total": step });
    await first.finish("FINISHED");
    expect(first.dropped).toBe(0);
    const runId = readTrackerLinks(runFolder).wandb?.runId;

    // a restarted trainer repeats step 3 (after its last checkpoint), then goes on
    const second = openTrackers(config.tracking, { runFolder, runName: "r", env, warn: () => {} });
    second.scalars(3, { "loss/total": 30 });
    second.scalars(4, { "loss/total": 4 });
    await second.finish("FAILED");
    expect(stub.violations).toEqual([]);
    const run = stub.runs.get(`stub-user/agentrl-b/${runId}`);
    expect(run?.history.map((row) => [row._step, row["loss/total"]])).toEqual([
      [1, 1],
      [2, 2],
      [3, 3],
      [4, 4],
    ]);
    expect(run?.complete).toBe(true);
    expect(run?.exitcode).toBe(1);
  });

  it("without WANDB_API_KEY, or with a wrong one, drops and counts with one warning and never throws", async () => {
    const before = stub.runs.size;
    for (const [env, reason] of [
      [{}, /WANDB_API_KEY is not set/],
      [{ WANDB_API_KEY: "wrong" }, /HTTP 401/],
    ] as const) {
      const warnings: string[] = [];
      const tracker = openTrackers(configFor("agentrl-c").tracking, {
        runFolder: tempDir("agentrl-wandb-"),
        runName: "r",
        env,
        warn: (m) => warnings.push(m),
      });
      tracker.scalars(1, { a: 1 });
      tracker.scalars(2, { a: 2 });
      await tracker.finish("FINISHED");
      expect(tracker.dropped).toBe(2);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toMatch(reason);
    }
    expect(stub.runs.size).toBe(before);
    expect(stub.violations).toEqual([]);
  });

  it("refuses a project name W&B cannot take, naming the field", () => {
    expect(() => parseConfig({ tracking: { wandb: { project: "a/b" } } })).toThrow(/tracking\.wandb\.project/);
  });
});

describe("W&B payload helpers", () => {
  it("bins a histogram as numpy does: edges around counts, an empty range widened by 0.5", () => {
    // [0, 3] in 3 bins: edges 0, 1, 2, 3; 3 falls in the last (closed) bin
    expect(wandbHistogram([0, 1, 2, 3], 3)).toEqual({ _type: "histogram", bins: [0, 1, 2, 3], values: [1, 1, 2] });
    expect(wandbHistogram([5, 5], 2)).toEqual({ _type: "histogram", bins: [4.5, 5, 5.5], values: [0, 2] });
    expect(wandbHistogram([Number.NaN])).toBeUndefined();
  });

  it("nests the flattened config again under W&B's {value, desc}", () => {
    expect(wandbConfig({ "policy.model.dModel": "128", "tasks.mix.0.name": "db", seed: "7" })).toEqual({
      policy: { value: { model: { dModel: "128" } }, desc: null },
      tasks: { value: { mix: { 0: { name: "db" } } }, desc: null },
      seed: { value: "7", desc: null },
    });
  });

  it("keeps keys W&B shows, and never one of its own underscore keys", () => {
    expect(wandbKey("task/os-std/success")).toBe("task/os-std/success");
    expect(wandbKey("a b:c")).toBe("a_b_c");
    expect(wandbKey("_step")).toBe("u_step");
  });

  it("chunks lines by size, a line alone may reach the limit", () => {
    expect(fileStreamChunks(["aaaa", "bbbb", "cccc"], 16)).toEqual([["aaaa", "bbbb"], ["cccc"]]);
    expect(fileStreamChunks(["x".repeat(40)], 16)).toEqual([["x".repeat(40)]]);
    expect(fileStreamChunks([])).toEqual([]);
  });
});
