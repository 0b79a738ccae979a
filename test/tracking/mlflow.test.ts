import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseConfig } from "../../shared/config/index.ts";
import { flattenParams, openTrackers, readTrackerLinks } from "../../shared/tracking/index.ts";
import { logBatches, MLFLOW_LIMITS } from "../../shared/tracking/mlflow.ts";
import { type MlflowStub, startMlflowStub } from "../support/mlflowStub.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The MLflow sink against a stand-in server on 127.0.0.1 that enforces the REST API's shapes and
 * limits (test/support/mlflowStub.ts): a body over a limit is a recorded violation, and every
 * test ends by asserting there were none. No real MLflow server was run here.
 */
let stub: MlflowStub;
beforeAll(async () => {
  stub = await startMlflowStub();
});
afterAll(() => stub.close());

function configFor(experiment: string, extra: Record<string, unknown> = {}) {
  return parseConfig({
    experimentId: "mlflow-sink",
    tracking: {
      tensorboard: { enabled: false },
      mlflow: { trackingUri: `${stub.url}/`, experiment },
      retryBaseSeconds: 0.01,
      finishSeconds: 20,
      ...extra,
    },
  });
}

describe("MLflow sink", () => {
  it("creates the experiment and a run, logs config, commit and every metric within log-batch limits, and finishes it", async () => {
    const runFolder = tempDir("agentrl-mlflow-");
    const warnings: string[] = [];
    const config = configFor("agentrl-a");
    const tracker = openTrackers(config.tracking, {
      runFolder,
      runName: config.experimentId,
      env: { MLFLOW_TRACKING_TOKEN: "t0ken" },
      warn: (m) => warnings.push(m),
    });
    // the default config alone flattens to more params than one log-batch may carry
    const params = { ...flattenParams(config), long: "x".repeat(7000), "odd:key": "1" };
    expect(Object.keys(params).length).toBeGreaterThan(100); // MLflow: at most 100 params per log-batch
    tracker.params(params, { "mlflow.source.git.commit": "abc123" });
    // one step with more metrics than one batch may carry, and a NaN that JSON cannot carry
    const wide = Object.fromEntries(Array.from({ length: 2500 }, (_, i) => [`task/t${i}/success`, i / 2500]));
    tracker.scalars(1, { ...wide, "loss/total": 0.5, "bad/nan": Number.NaN });
    for (let step = 2; step <= 5; step += 1) tracker.scalars(step, { "loss/total": 1 / step });
    tracker.histogram(5, "advantages", [1, 2, 3]); // MLflow has no histogram: ignored, not an error
    await tracker.finish("FINISHED");

    expect(stub.violations).toEqual([]);
    expect(warnings).toEqual([]);
    expect(tracker.dropped).toBe(0);
    expect(stub.experiments.get("agentrl-a")).toBeDefined();
    const runs = [...stub.runs.values()].filter((r) => r.experimentId === stub.experiments.get("agentrl-a"));
    expect(runs).toHaveLength(1);
    const run = runs[0]!;
    expect(run.name).toBe("mlflow-sink");
    expect(run.status).toBe("FINISHED");
    expect(run.tags.get("mlflow.source.git.commit")).toBe("abc123");
    expect(run.params.get("policy.model.dModel")).toBe(String(config.policy.model.dModel));
    expect(run.params.get("tasks.mix.0.name")).toBe(config.tasks.mix[0]?.name);
    expect(run.params.get("long")?.length).toBe(MLFLOW_LIMITS.paramValueLength);
    expect(run.params.get("odd_key")).toBe("1");
    expect(run.params.size).toBe(Object.keys(params).length);
    // 2501 finite metrics of step 1 + 4 steps of one
    expect(run.metrics).toHaveLength(2505);
    expect(run.metrics.filter((m) => m.key === "loss/total").map((m) => [m.step, m.value])).toEqual([
      [1, 0.5],
      [2, 0.5],
      [3, 1 / 3],
      [4, 0.25],
      [5, 0.2],
    ]);
    expect(run.batches).toBeGreaterThanOrEqual(3); // 2505 metrics need at least 3 batches
    expect(stub.authorizations.every((a) => a === "Bearer t0ken")).toBe(true);
    const links = readTrackerLinks(runFolder);
    expect(links.mlflow?.runId).toBe(run.runId);
    expect(links.mlflow?.url).toBe(`${stub.url}/#/experiments/${run.experimentId}/runs/${run.runId}`);
    expect(tracker.links()).toEqual({ mlflow: links.mlflow?.url });
  });

  it("retries a server that is briefly away, continues the same run after a restart, and marks a failed run FAILED", async () => {
    const runFolder = tempDir("agentrl-mlflow-");
    const config = configFor("agentrl-b");
    const env = { MLFLOW_TRACKING_USERNAME: "ann", MLFLOW_TRACKING_PASSWORD: "pw" };
    const first = openTrackers(config.tracking, { runFolder, runName: "r", env, warn: () => {} });
    stub.failNext(2);
    first.scalars(1, { "loss/total": 1 });
    await first.finish("FINISHED");
    expect(first.dropped).toBe(0);
    const runId = readTrackerLinks(runFolder).mlflow?.runId as string;

    const second = openTrackers(config.tracking, { runFolder, runName: "r", env, warn: () => {} });
    second.scalars(2, { "loss/total": 0.5 });
    await second.finish("FAILED");
    expect(stub.violations).toEqual([]);
    const run = stub.runs.get(runId)!;
    expect(run.metrics.map((m) => m.step)).toEqual([1, 2]);
    expect(run.status).toBe("FAILED");
    expect(stub.authorizations.at(-1)).toBe(`Basic ${Buffer.from("ann:pw").toString("base64")}`);
  });

  it("drops and counts what the server rejects, with one warning, and never throws", async () => {
    const runFolder = tempDir("agentrl-mlflow-");
    const warnings: string[] = [];
    const config = configFor("agentrl-c");
    const tracker = openTrackers(config.tracking, { runFolder, runName: "r", env: {}, warn: (m) => warnings.push(m) });
    tracker.params({ lr: "0.1" });
    await tracker.finish("FINISHED");
    // a param's value may not change: MLflow answers 400, which no retry can fix
    const again = openTrackers(config.tracking, { runFolder, runName: "r", env: {}, warn: (m) => warnings.push(m) });
    again.params({ lr: "0.2" });
    again.scalars(1, { "loss/total": 1 });
    await again.finish("FINISHED");
    // the params record is dropped; the step's metrics, queued beside it, still arrive
    expect(again.dropped).toBe(1);
    const runId = readTrackerLinks(runFolder).mlflow?.runId as string;
    expect(stub.runs.get(runId)?.metrics.map((m) => m.step)).toEqual([1]);
    expect(stub.runs.get(runId)?.params.get("lr")).toBe("0.1");
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/mlflow: .*HTTP 400 INVALID_PARAMETER_VALUE/);
    // the batch (params + metrics), then the params record alone
    expect(stub.violations).toEqual([
      expect.stringMatching(/param lr changed/),
      expect.stringMatching(/param lr changed/),
    ]);
    stub.violations.splice(0); // the violation was this test's doing
  });

  it("a server that is never there costs retries and drops, never the step", async () => {
    const warnings: string[] = [];
    const config = parseConfig({
      tracking: {
        tensorboard: { enabled: false },
        mlflow: { trackingUri: "http://127.0.0.1:9", experiment: "x" },
        retries: 2,
        retryBaseSeconds: 0.01,
      },
    });
    const tracker = openTrackers(config.tracking, {
      runFolder: tempDir("agentrl-mlflow-"),
      runName: "r",
      env: {},
      warn: (m) => warnings.push(m),
    });
    tracker.scalars(1, { a: 1 });
    tracker.scalars(2, { a: 2 });
    await tracker.finish("FINISHED");
    expect(tracker.dropped).toBeGreaterThanOrEqual(1);
    expect(warnings).toHaveLength(1);
  });
});

describe("log-batch splitting", () => {
  it("keeps every batch within each limit", () => {
    const kv = (n: number, prefix: string) =>
      Array.from({ length: n }, (_, i) => ({ key: `${prefix}${i}`, value: "v" }));
    const metrics = Array.from({ length: 2345 }, (_, i) => ({ key: `m${i}`, value: i, timestamp: 0, step: 1 }));
    const batches = logBatches(kv(250, "p"), kv(150, "t"), metrics);
    for (const b of batches) {
      expect(b.params.length).toBeLessThanOrEqual(100);
      expect(b.tags.length).toBeLessThanOrEqual(100);
      expect(b.metrics.length).toBeLessThanOrEqual(1000);
      expect(b.params.length + b.tags.length + b.metrics.length).toBeLessThanOrEqual(1000);
      expect(JSON.stringify(b).length).toBeLessThan(1_000_000);
    }
    expect(batches.flatMap((b) => b.params)).toHaveLength(250);
    expect(batches.flatMap((b) => b.tags)).toHaveLength(150);
    expect(batches.flatMap((b) => b.metrics)).toHaveLength(2345);
  });

  it("splits by size when values are long (1 MB per request)", () => {
    const params = Array.from({ length: 100 }, (_, i) => ({ key: `p${i}`, value: "x".repeat(6000) }));
    const tags = Array.from({ length: 100 }, (_, i) => ({ key: `t${i}`, value: "y".repeat(8000) }));
    const batches = logBatches(params, tags, []);
    expect(batches.length).toBeGreaterThan(1);
    for (const b of batches) expect(JSON.stringify({ run_id: "r", ...b }).length).toBeLessThan(1_000_000);
  });
});
