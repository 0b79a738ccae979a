import { writeFileSync } from "node:fs";
import { join } from "node:path";
import * as tf from "@tensorflow/tfjs";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readMetrics } from "../../cli/report/report.ts";
import { type ExperimentConfigInput, parseConfig } from "../../shared/config/index.ts";
import { createLogger } from "../../shared/log.ts";
import { createPolicy } from "../../shared/model/transformer.ts";
import type { TrainablePolicy } from "../../shared/model/types.ts";
import { listVersions } from "../../shared/protocol/checkpoints.ts";
import { type MemberDropped, PolicyPublished, type TrajectoryReady } from "../../shared/protocol/messages.ts";
import type { StepMetrics } from "../../shared/protocol/metrics.ts";
import { StepRecord, stepRecordKey } from "../../shared/protocol/stepRecord.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Queue, Transport } from "../../shared/transport/types.ts";
import { importanceWeights, prepareBatch } from "../../trainer-image/trainer/batch.ts";
import { GroupBuffer, groupsNeeded } from "../../trainer-image/trainer/buffer.ts";
import { readLedger } from "../../trainer-image/trainer/ledger.ts";
import { runTrainer, type StepInfo } from "../../trainer-image/trainer/trainer.ts";
import { tempDir } from "../support/tmp.ts";
import { deliver, fakeTrajectory, publishBase, TINY_MODEL, tinyTrainerConfig } from "./trainerHelpers.ts";

const trainerConfig = parseConfig({}).trainer;

function ready(groupId: string, sample: number, groupSize = 2): TrajectoryReady {
  return {
    schemaVersion: 1,
    trajectoryId: `${groupId}-s${sample}`,
    experimentId: "e",
    groupId,
    groupSize,
    task: "db",
    key: "k",
    tokens: 1,
    reward: 0,
    status: "completed",
    minVersion: 0,
    maxVersion: 0,
  };
}

function dropped(groupId: string, sample: number, groupSize = 2): MemberDropped {
  return {
    schemaVersion: 1,
    kind: "member-dropped",
    trajectoryId: `${groupId}-s${sample}`,
    experimentId: "e",
    groupId,
    groupSize,
    task: "db",
    attempts: 3,
    reason: "EnvEpisodeFailedError: task error",
  };
}

describe("GroupBuffer", () => {
  it("releases only complete groups, oldest first, and counts redeliveries once", () => {
    const buffer = new GroupBuffer();
    expect(buffer.add(ready("b", 0), "r1", 10)).toBe("added");
    expect(buffer.add(ready("a", 0), "r2", 20)).toBe("added");
    expect(buffer.completeGroups()).toHaveLength(0);
    expect(buffer.add(ready("b", 0), "r1-again", 30)).toBe("redelivered");
    expect(buffer.completeGroups()).toHaveLength(0); // a redelivery is not a second member
    buffer.add(ready("a", 1), "r3", 40);
    buffer.add(ready("b", 1), "r4", 50);
    expect(buffer.completeGroups().map((g) => g.groupId)).toEqual(["b", "a"]);
    const [b] = buffer.take(buffer.completeGroups().slice(0, 1));
    expect(b?.members.get("b-s0")).toMatchObject({ receiptHandle: "r1-again", olderReceipts: ["r1"] });
    expect(buffer.receipts().sort()).toEqual(["r2", "r3"]);
  });

  it("expires incomplete groups after the timeout", () => {
    const buffer = new GroupBuffer();
    buffer.add(ready("slow", 0, 4), "r", 1_000);
    expect(buffer.expiredGroups(1_500, 1_000)).toHaveLength(0);
    expect(buffer.expiredGroups(2_500, 1_000).map((g) => g.groupId)).toEqual(["slow"]);
  });

  it("completes a group with members announced as dropped, which count as arrivals, not as trajectories", () => {
    const buffer = new GroupBuffer();
    buffer.add(ready("g", 0, 3), "r0", 10);
    buffer.add(ready("g", 1, 3), "r1", 20);
    expect(buffer.completeGroups()).toHaveLength(0);
    expect(buffer.drop(dropped("g", 2, 3), "d2", 30)).toBe("added");
    expect(buffer.drop(dropped("g", 2, 3), "d2-again", 40)).toBe("redelivered");
    expect(buffer.drop(dropped("g", 0, 3), "d0", 40)).toBe("redelivered"); // it has a trajectory already
    const [group] = buffer.completeGroups();
    expect(group?.members.size).toBe(2);
    expect([...(group?.dropped.keys() ?? [])]).toEqual(["g-s2"]);
    expect(buffer.receipts().sort()).toEqual(["d0", "d2-again", "r1"]);
  });

  it("the first step waits for warmupFactor batches", () => {
    expect(groupsNeeded(8, 1.7, true)).toBe(14);
    expect(groupsNeeded(8, 1.7, false)).toBe(8);
  });
});

describe("prepareBatch: staleness and advantages", () => {
  const t = (groupId: string, sample: number, reward: number, tokenVersion: number) =>
    fakeTrajectory("e", groupId, sample, reward, { tokenVersion });

  it("drops tokens past the bound, counts them, and keeps group baselines", () => {
    // current version 5, bound 2: tokens of version 2 (staleness 3) are dropped, version 3 kept
    const batch = prepareBatch(
      [t("g", 0, 1, 2), t("g", 1, 0, 3)],
      5,
      { ...trainerConfig, maxStaleness: 2, stalePolicy: "drop", taskAdvantageNorm: false },
      1_000,
    );
    expect(batch.metrics["rollout/stale_dropped"]).toBe(6);
    expect(batch.metrics["rollout/stale_dropped_trajectories"]).toBe(1);
    expect(batch.metrics["rollout/staleness_max"]).toBe(2);
    expect(batch.metrics["rollout/staleness_max_plain"]).toBe(2);
    expect(batch.metrics["staleness/2"]).toBe(6);
    expect(batch.rows.map((r) => r.trajectory)).toEqual([1]);
    expect(batch.tokens).toBe(6);
    // GRPO over both rewards [1, 0]: the kept member still gets -0.5 / (0.7071 + 1e-6)
    expect(batch.trajectoryAdvantages[1]).toBeCloseTo(-0.5 / (Math.SQRT1_2 + 1e-6), 9);
    expect(batch.rows[0]?.advantages.filter((a) => a !== 0)).toHaveLength(6);
  });

  it("bounds every token, the stale pool's included: by default past the bound means a capped importance weight", () => {
    const fromStalePool = t("g", 0, 1, 0);
    fromStalePool.policyPool = fromStalePool.policyPool.map((p) => (p ? "stale" : null));
    const trajectories = [fromStalePool, t("g", 1, 0, 4)];
    const bound = { ...trainerConfig, maxStaleness: 2 };
    expect(bound.stalePolicy).toBe("importance-weight");
    const weighted = prepareBatch(trajectories, 5, bound, 1_000);
    // stale-pool tokens (staleness 5 > 2) flagged for the capped weight, like any other pool's
    expect(weighted.metrics["rollout/importance_weighted"]).toBe(6);
    expect(weighted.rows[0]?.pastBound.slice(8)).toEqual([1, 1, 1, 1, 1, 1]);
    expect(weighted.rows[1]?.pastBound.every((f) => f === 0)).toBe(true);
    expect(weighted.metrics["rollout/staleness_max"]).toBe(5);
    expect(weighted.metrics["rollout/staleness_max_plain"]).toBe(1);
    const dropped = prepareBatch(trajectories, 5, { ...bound, stalePolicy: "drop" }, 1_000);
    expect(dropped.metrics["rollout/stale_dropped"]).toBe(6);
    expect(dropped.rows.map((r) => r.trajectory)).toEqual([1]);
  });

  it("importance-weight mode keeps stale tokens with a capped weight and a proximal ratio", () => {
    const batch = prepareBatch(
      [t("g", 0, 1, 0), t("g", 1, 0, 5)],
      5,
      { ...trainerConfig, maxStaleness: 2, stalePolicy: "importance-weight" },
      1_000,
    );
    expect(batch.metrics["rollout/importance_weighted"]).toBe(6);
    expect(batch.metrics["rollout/stale_dropped"]).toBe(0);
    const row = batch.rows[0]!;
    // proximal -5.0 vs behaviour -5.7: weight min(exp(0.7), 2) = 2 (capped); ratio base becomes -5.0
    const proximal = row.oldLogp.map(() => -5.0);
    const { oldLogp, weights } = importanceWeights(row, proximal, 2);
    expect(weights.slice(8)).toEqual([2, 2, 2, 2, 2, 2]);
    expect(oldLogp.slice(8)).toEqual([-5, -5, -5, -5, -5, -5]);
    const fresh = importanceWeights(batch.rows[1]!, proximal, 2);
    expect(fresh.weights.every((w) => w === 1)).toBe(true);
    expect(fresh.oldLogp).toEqual(batch.rows[1]!.oldLogp);
  });

  it("skipUniformGroups leaves groups with one reward out of rows, token-mean and task normalization", () => {
    const mixed = [t("m", 0, 1, 0), t("m", 1, 0, 0)];
    const allFailed = [t("u", 0, 0, 0), t("u", 1, 0, 0)];
    const config = { ...trainerConfig, skipUniformGroups: true };
    const batch = prepareBatch([...allFailed, ...mixed], 0, config, 1_000);
    expect(batch.rows.map((r) => r.trajectory)).toEqual([2, 3]);
    expect(batch.tokens).toBe(12);
    expect(batch.metrics["rollout/groups_uniform"]).toBe(1);
    expect(batch.metrics["rollout/trajectories_skipped"]).toBe(2);
    // exactly the step the mixed group alone would make, task normalization included
    const alone = prepareBatch(mixed, 0, config, 1_000);
    expect(batch.rows.map((r) => r.advantages)).toEqual(alone.rows.map((r) => r.advantages));
    // without the switch the uniform group's zero advantages are trained and pull the task's mean
    const kept = prepareBatch([...allFailed, ...mixed], 0, trainerConfig, 1_000);
    expect(kept.rows).toHaveLength(4);
    expect(kept.tokens).toBe(24);
    expect(kept.metrics["rollout/groups_uniform"]).toBe(1);
    expect(kept.metrics["rollout/trajectories_skipped"]).toBe(0);
    expect(kept.rows[2]?.advantages).not.toEqual(alone.rows[0]?.advantages);
  });

  it("reports per task the estimator's token advantages and the normalized ones, and per pool the advantage its tokens got", () => {
    const task = (name: string, groupId: string, sample: number, reward: number) =>
      fakeTrajectory("e", groupId, sample, reward, { task: name });
    const dbWin = task("db", "g1", 0, 1);
    dbWin.policyPool = dbWin.policyPool.map((p) => (p ? "stale" : null));
    // os's success trains 2 tokens against its failure's 6: its raw token advantages are off-centre
    const osWin = task("os", "g2", 0, 1);
    osWin.lossMask = osWin.lossMask.map((m, i) => (i >= 12 ? m : 0));
    const trajectories = [dbWin, task("db", "g1", 1, 0), osWin, task("os", "g2", 1, 0)];
    const a = 0.5 / (Math.SQRT1_2 + 1e-6); // GRPO's ± advantage of a [1, 0] group
    const normalized = prepareBatch(trajectories, 0, { ...trainerConfig, taskAdvantageNorm: true }, 1_000).metrics;
    expect(normalized["task/db/adv_tokens"]).toBe(12);
    expect(normalized["task/os/adv_tokens"]).toBe(8);
    expect(normalized["task/db/adv_raw_mean"]).toBeCloseTo(0, 9);
    expect(normalized["task/db/adv_raw_std"]).toBeCloseTo(a, 9);
    expect(normalized["task/os/adv_raw_mean"]).toBeCloseTo((2 * a - 6 * a) / 8, 9);
    expect(normalized["task/os/adv_raw_std"]).toBeCloseTo(a * Math.sqrt(0.75), 9);
    for (const name of ["db", "os"]) {
      expect(normalized[`task/${name}/adv_mean`]).toBeCloseTo(0, 9);
      expect(normalized[`task/${name}/adv_std`]).toBeCloseTo(1, 5);
    }
    expect(normalized["pool/stale/tokens"]).toBe(6);
    expect(normalized["pool/current/tokens"]).toBe(14);
    expect(normalized["pool/stale/adv_mean"]).toBeCloseTo(a / (a + 1e-6), 9);
    // without normalization the loss sees the estimator's advantages
    const raw = prepareBatch(trajectories, 0, { ...trainerConfig, taskAdvantageNorm: false }, 1_000).metrics;
    expect(raw["task/os/adv_mean"]).toBeCloseTo((2 * a - 6 * a) / 8, 9);
    expect(raw["task/os/adv_std"]).toBeCloseTo(a * Math.sqrt(0.75), 9);
    expect(raw["pool/stale/adv_mean"]).toBeCloseTo(a, 9);
  });

  it("cuts sequences to the context and never trains position 0", () => {
    const long = t("g", 0, 1, 0);
    const batch = prepareBatch([long, t("g", 1, 0, 0)], 0, trainerConfig, 10);
    expect(batch.rows[0]?.tokens.length).toBe(10);
    expect(batch.metrics["rollout/truncated"]).toBe(2);
    expect(batch.tokens).toBe(4);
  });
});

/** Records the order of publish-relevant operations. */
function recording(transport: Transport, events: string[]): Transport {
  const wrapQueue = (name: string, queue: Queue): Queue =>
    new Proxy(queue, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (prop === "send" || prop === "delete")
          return async (arg: string) => {
            events.push(`${name}.${String(prop)}`);
            return (value as (a: string) => Promise<unknown>).call(target, arg);
          };
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  return {
    queue: (name) => wrapQueue(name, transport.queue(name)),
    store: (name) => {
      const store = transport.store(name);
      return new Proxy(store, {
        get(target, prop, receiver) {
          const value = Reflect.get(target, prop, receiver);
          if (prop === "putIfAbsent" || prop === "put")
            return async (key: string, body: string | Uint8Array) => {
              if (key.endsWith("manifest.json") || key.endsWith("ledger.json") || key.includes("/hf/"))
                events.push(`put ${key}`);
              return (value as (k: string, b: string | Uint8Array) => Promise<unknown>).call(target, key, body);
            };
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
    },
    tidy: () => transport.tidy(),
    close: () => transport.close(),
  };
}

describe("runTrainer on the local transport with a tiny model", () => {
  let dir: string;
  let transport: Transport;
  const config = (overrides: ExperimentConfigInput = {}) => tinyTrainerConfig(dir, overrides);

  beforeEach(async () => {
    dir = tempDir("trainer-");
    transport = await createTransport(config().transport);
    await publishBase(transport);
  });
  afterEach(async () => {
    await transport.close();
  });

  const batchOf = (step: number) =>
    [0, 1].flatMap((g) => {
      const groupId = `s${step}g${g}`;
      const task = g === 0 ? "db" : "os";
      return [0, 1].map((sample) => fakeTrajectory("tr", groupId, sample, sample === 0 ? 1 : -0.2, { task }));
    });

  it("trains 3 steps: finite losses, versions published, every message consumed once and acknowledged", async () => {
    // one batch at a time (the trainer takes every complete group it has), the next after each step
    await deliver(transport, batchOf(0));
    await deliver(transport, [batchOf(0)[0]!]); // a duplicated TrajectoryReady
    const lines: StepMetrics[] = [];
    const tensors: number[] = [];
    const events: string[] = [];
    const distributions: Array<{ step: number; advantages: readonly number[]; staleness: readonly number[] }> = [];
    const summary = await runTrainer(config(), recording(transport, events), {
      waitSeconds: 0,
      metrics: (line) => {
        lines.push(line);
      },
      distributions: (step, values) => void distributions.push({ step, ...values }),
      onStep: (info) => {
        tensors.push(tf.memory().numTensors);
        if (info.step < 3) void deliver(transport, batchOf(info.step));
        if (info.step === 1) void deliver(transport, [batchOf(0)[1]!]); // a late duplicate of a trained one
      },
    });
    expect(summary).toMatchObject({ step: 3, version: 3, stepsThisRun: 3 });
    expect(await listVersions(transport.store("checkpoints"))).toEqual([3, 2, 1, 0]);
    // each line but the first carries how long the publish before it took
    expect(lines[0]?.metrics["time/previous_publish_seconds"]).toBeUndefined();
    for (const line of lines.slice(1)) expect(line.metrics["time/previous_publish_seconds"]).toBeGreaterThan(0);
    for (const line of lines) {
      expect(Number.isFinite(line.metrics["loss/policy"])).toBe(true);
      expect(Number.isFinite(line.metrics["loss/kl"])).toBe(true);
      expect(line.metrics["policy/grad_norm"]).toBeGreaterThan(0);
      expect(line.metrics["task/db/success"]).toBe(0.5);
      expect(line.metrics["task/os/reward"]).toBeCloseTo(0.4, 9);
    }
    const ledger = await readLedger(transport.store("checkpoints"), 3);
    expect(ledger?.consumed).toHaveLength(12);
    expect(new Set(ledger?.consumed).size).toBe(12);
    expect(ledger?.totals["totals/trajectories"]).toBe(12);
    expect(ledger?.totals["totals/duplicates"]).toBeGreaterThanOrEqual(1);
    expect(await transport.queue("trajectories").approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    // versions were announced in order
    const announced = await transport.queue("policy-events").receive({ maxMessages: 10 });
    expect(announced.map((m) => PolicyPublished.parse(JSON.parse(m.body)).version).sort()).toEqual([1, 2, 3]);
    // ledger, then manifest, then the event, then the acknowledgements
    const firstDelete = events.indexOf("trajectories.delete");
    expect(events.indexOf("put policies/v1/ledger.json")).toBeLessThan(events.indexOf("put policies/v1/manifest.json"));
    expect(events.indexOf("put policies/v1/manifest.json")).toBeLessThan(events.indexOf("policy-events.send"));
    expect(events.indexOf("policy-events.send")).toBeLessThan(firstDelete);
    // no tensor leak from step to step
    expect(tensors[2]).toBe(tensors[0]);
    // the histograms' values: one advantage per trajectory (zero-mean within each group of 2),
    // one staleness per trained token, as many as the step's trained tokens
    expect(distributions.map((d) => d.step)).toEqual([1, 2, 3]);
    for (const d of distributions) {
      expect(d.advantages).toHaveLength(4);
      expect(d.advantages[0]! + d.advantages[1]!).toBeCloseTo(0, 9);
      expect(d.staleness.length).toBe(lines[d.step - 1]?.metrics["rollout/tokens"]);
      expect(d.staleness.every((s) => s >= 0)).toBe(true);
    }
  });

  it("policy.exportHf: a published version is also a Hugging Face folder, written after its manifest and before its event", async () => {
    await deliver(transport, batchOf(0));
    const events: string[] = [];
    const exporting = config({
      policy: { backend: "cpu", model: TINY_MODEL, exportHf: true },
      trainer: { maxSteps: 1 },
    });
    await runTrainer(exporting, recording(transport, events), { waitSeconds: 0 });
    const hf = events.filter((e) => e.startsWith("put policies/v1/hf/"));
    expect(hf.sort()).toEqual(
      ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"].map(
        (f) => `put policies/v1/hf/${f}`,
      ),
    );
    expect(events.indexOf("put policies/v1/manifest.json")).toBeLessThan(
      events.indexOf("put policies/v1/hf/config.json"),
    );
    expect(events.indexOf("put policies/v1/hf/config.json")).toBeLessThan(events.indexOf("policy-events.send"));
    const exported = JSON.parse((await transport.store("checkpoints").getText("policies/v1/hf/config.json"))!);
    expect(exported).toMatchObject({ architectures: ["LlamaForCausalLM"], hidden_size: TINY_MODEL.dModel });
  });

  it("a trainer killed before publishing resumes from the last version: nothing trained twice, nothing lost", async () => {
    await deliver(transport, batchOf(0));
    const lines: StepMetrics[] = [];
    await expect(
      runTrainer(config(), transport, {
        waitSeconds: 0,
        metrics: (line) => void lines.push(line),
        onStep: (info) => void deliver(transport, batchOf(info.step)),
        beforePublish: (version) => {
          if (version === 2) throw new Error("killed");
        },
      }),
    ).rejects.toThrow(/killed/);
    expect(await listVersions(transport.store("checkpoints"))).toEqual([1, 0]);
    // the unacknowledged messages come back after the visibility timeout; a new trainer resumes at v1
    // the killed step's line was written before its publish, so no published version lacks one
    expect(lines.map((l) => l.step)).toEqual([1, 2]);
    const summary = await runTrainer(config(), transport, {
      waitSeconds: 1,
      metrics: (line) => void lines.push(line),
      onStep: (info) => {
        if (info.step === 2) void deliver(transport, batchOf(2));
      },
    });
    expect(summary).toMatchObject({ step: 3, version: 3, stepsThisRun: 2 });
    // step 2 was trained again; readers keep its second line
    expect(lines.map((l) => l.step)).toEqual([1, 2, 2, 3]);
    const file = join(tempDir("agentrl-metrics-"), "metrics.jsonl");
    writeFileSync(file, lines.map((l) => `${JSON.stringify(l)}\n`).join(""));
    const records = await readMetrics(file);
    expect(records.map((r) => r.step)).toEqual([1, 2, 3]);
    expect(records[1]).toEqual(lines[2]);
    const ledger = await readLedger(transport.store("checkpoints"), 3);
    expect(ledger?.consumed.slice().sort()).toEqual(
      [0, 1, 2].flatMap((s) => batchOf(s).map((t) => t.trajectoryId)).sort(),
    );
    expect(ledger?.totals["totals/trajectories"]).toBe(12);
    expect(await transport.queue("trajectories").approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    // the optimizer state travels with each version, so the resume continued Adam where it was
    expect(await transport.store("checkpoints").head("policies/v1/optimizer.safetensors")).toBeDefined();
  });

  it("honours the staleness bound across a resume and counts the drops exactly", async () => {
    // tokens of version 0 against a trainer at v1..: bound 0 drops everything older than the weights
    const cfg = config({ trainer: { maxStaleness: 0, maxSteps: 2, stalePolicy: "drop" } });
    await deliver(transport, batchOf(0));
    await runTrainer(cfg, transport, { waitSeconds: 0, maxStepsThisRun: 1 });
    await deliver(transport, batchOf(1)); // generated by v0, trained at v1: staleness 1 > 0
    const lines: StepMetrics[] = [];
    await runTrainer(cfg, transport, { waitSeconds: 0, metrics: (l) => void lines.push(l) });
    expect(lines[0]?.metrics["rollout/stale_dropped"]).toBe(24);
    expect(lines[0]?.metrics["rollout/stale_dropped_trajectories"]).toBe(4);
    expect(lines[0]?.metrics["rollout/tokens"]).toBe(0);
    const ledger = await readLedger(transport.store("checkpoints"), 2);
    expect(ledger?.totals["totals/stale_dropped"]).toBe(24);
    expect(ledger?.totals["totals/trajectories"]).toBe(8);
  });

  it("reports rollout/trainer log-prob agreement on tokens of the trainer's own version", async () => {
    // behaviour log-probs computed by the very weights the trainer starts from: the gap must vanish
    const base = createPolicy(TINY_MODEL, 1);
    const temperature = config().rollout.temperature;
    const exact = batchOf(0).map((t) => {
      const logp = base.logProbs([Int32Array.from(t.tokenIds)], temperature)[0]!;
      return { ...t, logprobs: t.lossMask.map((m, i) => (m ? (logp[i] as number) : 0)) };
    });
    base.dispose();
    await deliver(transport, exact);
    const lines: StepMetrics[] = [];
    await runTrainer(config(), transport, { waitSeconds: 0, maxStepsThisRun: 1, metrics: (l) => void lines.push(l) });
    expect(lines[0]?.metrics["policy/logp_gap_fresh"]).toBeLessThan(1e-4);
    expect(lines[0]?.metrics["policy/clip_frac"]).toBe(0);
    // the synthetic -5.7 log-probs of the other tests are measurably off
    // (the trainer is at v1 now, so these claim version 1 to count as its own)
    await deliver(
      transport,
      ["late0", "late1"].flatMap((g) =>
        [0, 1].map((sample) => fakeTrajectory("tr", g, sample, sample, { tokenVersion: 1 })),
      ),
    );
    await runTrainer(config(), transport, { waitSeconds: 0, maxStepsThisRun: 1, metrics: (l) => void lines.push(l) });
    expect(lines[1]?.metrics["policy/logp_gap_fresh"]).toBeGreaterThan(1e-3);
  });

  it("moves the policy toward rewarded trajectories and away from punished ones", async () => {
    // every group: sample 0 is sequence X (reward 1), sample 1 is sequence Y (reward -0.2)
    const x = fakeTrajectory("tr", "x", 0, 1, { seed: 11 });
    const y = fakeTrajectory("tr", "y", 1, -0.2, { seed: 12 });
    const groupAt = (step: number, g: number) =>
      [x, y].map((t, sample) => ({
        ...t,
        groupId: `l${step}g${g}`,
        trajectoryId: `l${step}g${g}-s${sample}`,
        sample,
        policyVersion: t.policyVersion.map((v) => (v >= 0 ? step : -1)),
      }));
    const temperature = config().rollout.temperature;
    const generatedLogp = (policy: Pick<TrainablePolicy, "logProbs">, t: typeof x) => {
      const logp = policy.logProbs([Int32Array.from(t.tokenIds)], temperature)[0]!;
      return t.lossMask.reduce<number>((sum, m, i) => sum + (m ? (logp[i] as number) : 0), 0);
    };
    const base = createPolicy(TINY_MODEL, 1);
    const before = { x: generatedLogp(base, x), y: generatedLogp(base, y) };
    base.dispose();
    await deliver(transport, [...groupAt(0, 0), ...groupAt(0, 1)]);
    await runTrainer(config(), transport, {
      waitSeconds: 0,
      onStep: (info) => {
        if (info.step < 3) void deliver(transport, [...groupAt(info.step, 0), ...groupAt(info.step, 1)]);
      },
    });
    const { loadCheckpoint } = await import("../../shared/model/checkpoint.ts");
    const trained = (await loadCheckpoint(transport.store("checkpoints"), 3)).policy;
    const after = { x: generatedLogp(trained, x), y: generatedLogp(trained, y) };
    trained.dispose();
    expect(after.x).toBeGreaterThan(before.x + 0.1);
    expect(after.y).toBeLessThan(before.y - 0.1);
  });

  it("trains a group without its dropped member, counts the drop per task and acknowledges it", async () => {
    const [first, second, ...others] = batchOf(0);
    await deliver(transport, [first!, ...others]);
    await transport.queue("trajectories").send(
      JSON.stringify({
        schemaVersion: 1,
        kind: "member-dropped",
        trajectoryId: second!.trajectoryId,
        experimentId: "tr",
        groupId: second!.groupId,
        groupSize: 2,
        task: second!.task,
        attempts: 10,
        reason: "EnvEpisodeFailedError: task error",
      }),
    );
    const lines: StepMetrics[] = [];
    await runTrainer(config(), transport, { waitSeconds: 0, maxStepsThisRun: 1, metrics: (l) => void lines.push(l) });
    const metrics = lines[0]!.metrics;
    expect(metrics["rollout/trajectories"]).toBe(3);
    expect(metrics["rollout/groups"]).toBe(2);
    expect(metrics["rollout/env_failures"]).toBe(1);
    expect(metrics["task/db/env_failures"]).toBe(1);
    expect(metrics["task/os/env_failures"]).toBeUndefined();
    expect(metrics["totals/env_failures"]).toBe(1);
    const ledger = await readLedger(transport.store("checkpoints"), 1);
    expect(ledger?.consumed).toContain(second!.trajectoryId);
    expect(await transport.queue("trajectories").approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
  });

  it("every step is a version: with checkpointEvery 2 staleness counts unpublished steps, and only even versions are published", async () => {
    const cfg = config({ trainer: { maxSteps: 3, checkpointEvery: 2, maxStaleness: 0, stalePolicy: "drop" } });
    await deliver(transport, batchOf(0));
    const lines: StepMetrics[] = [];
    const summary = await runTrainer(cfg, transport, {
      waitSeconds: 0,
      metrics: (l) => void lines.push(l),
      // every batch claims the newest published version (0, then 0 again, then 2)
      onStep: (info) => {
        if (info.step < 3)
          void deliver(
            transport,
            batchOf(info.step).map((t) => ({
              ...t,
              policyVersion: t.policyVersion.map((v) => (v >= 0 ? info.step - (info.step % 2) : -1)),
            })),
          );
      },
    });
    expect(summary).toMatchObject({ step: 3, version: 3 });
    expect(lines.map((l) => l.version)).toEqual([1, 2, 3]);
    expect(await listVersions(transport.store("checkpoints"))).toEqual([3, 2, 0]);
    // step 2 trains at weights v1 (unpublished): v0 tokens are one version stale and past the bound
    expect(lines[1]?.metrics["rollout/stale_dropped"]).toBe(24);
    // step 3 trains at v2 on v2 tokens: fresh
    expect(lines[2]?.metrics["rollout/stale_dropped"]).toBe(0);
    expect(lines[2]?.metrics["staleness/0"]).toBe(24);
  });

  it("writes tokens/s and raises the log-prob gap alarm naming the worst trajectory; stopOnLogpGap stops unpublished", async () => {
    const base = createPolicy(TINY_MODEL, 1);
    const temperature = config().rollout.temperature;
    // exact behaviour log-probs, except one trajectory whose are 0.5 nats off
    const skewed = batchOf(0).map((t, i) => {
      const logp = base.logProbs([Int32Array.from(t.tokenIds)], temperature)[0]!;
      const off = i === 2 ? 0.5 : 0;
      return { ...t, logprobs: t.lossMask.map((m, k) => (m ? (logp[k] as number) + off : 0)) };
    });
    base.dispose();
    await deliver(transport, skewed);
    const lines: StepMetrics[] = [];
    const logged: string[] = [];
    const log = createLogger({ role: "trainer" }, { write: (line: string) => void logged.push(line) });
    await runTrainer(config(), transport, {
      waitSeconds: 0,
      maxStepsThisRun: 1,
      log,
      metrics: (l) => void lines.push(l),
    });
    expect(lines[0]?.metrics["throughput/tokens_per_s"]).toBeGreaterThan(0);
    expect(lines[0]?.metrics["policy/logp_gap_fresh"]).toBeCloseTo(0.5 / 4, 3);
    expect(lines[0]?.metrics["policy/logp_gap_alarm"]).toBe(1);
    const warning = logged.map((l) => JSON.parse(l)).find((l) => /logpGapAlarm/.test(l.msg));
    expect(warning?.worst).toMatchObject({ trajectoryId: skewed[2]!.trajectoryId });
    expect(warning?.worst.gap).toBeCloseTo(0.5, 3);

    // the same with stopOnLogpGap: a clear error, and the step is not published
    await deliver(
      transport,
      batchOf(1).map((t) => ({ ...t, policyVersion: t.policyVersion.map((v) => (v >= 0 ? 1 : -1)) })),
    );
    await expect(
      runTrainer(config({ trainer: { stopOnLogpGap: true } }), transport, { waitSeconds: 0, maxStepsThisRun: 1 }),
    ).rejects.toThrow(/logp_gap_fresh .* exceeds trainer.logpGapAlarm 0.01 at step 2 .*not published/);
    expect(await listVersions(transport.store("checkpoints"))).toEqual([1, 0]);
  });

  it("trainer.dataParallel 2 (sync mode): weights, losses and the step record equal one thread's within float tolerance", async () => {
    const run = async (localDir: string, dataParallel: number) => {
      const experiment = tinyTrainerConfig(localDir, { trainer: { mode: "sync", dataParallel, maxSteps: 2 } });
      const own = await createTransport(experiment.transport);
      try {
        await publishBase(own);
        await deliver(own, batchOf(0));
        const lines: StepMetrics[] = [];
        await runTrainer(experiment, own, {
          waitSeconds: 0,
          metrics: (l) => void lines.push(l),
          onStep: (info) => {
            if (info.step < 2) void deliver(own, batchOf(info.step));
          },
        });
        const { loadCheckpoint } = await import("../../shared/model/checkpoint.ts");
        const trained = (await loadCheckpoint(own.store("checkpoints"), 2)).policy;
        const values = trained.values();
        trained.dispose();
        const body = await own.store("trajectories").get(stepRecordKey("tr", 2));
        const record = StepRecord.parse(JSON.parse(Buffer.from(body as Uint8Array).toString("utf8")));
        return { lines, values, record };
      } finally {
        await own.close();
      }
    };
    const one = await run(tempDir("trainer-dp1-"), 1);
    const two = await run(tempDir("trainer-dp2-"), 2);
    let worst = 0;
    for (const [name, x] of one.values) {
      const y = two.values.get(name) as Float32Array;
      x.forEach((v, i) => {
        worst = Math.max(worst, Math.abs(v - (y[i] as number)));
      });
    }
    expect(worst).toBeLessThan(1e-4);
    expect(two.lines).toHaveLength(2);
    expect(two.lines.map((l) => l.metrics["time/train_threads"])).toEqual([2, 2]);
    expect(one.lines.map((l) => l.metrics["time/train_threads"])).toEqual([1, 1]);
    for (const [i, line] of two.lines.entries())
      for (const key of ["loss/policy", "loss/kl", "policy/grad_norm", "policy/logp_gap_fresh", "policy/approx_kl"])
        expect(line.metrics[key], key).toBeCloseTo(one.lines[i]?.metrics[key] as number, 5);
    // the trainer's log-probs reached the step record from both threads
    expect(two.record.trajectories.map((t) => t.newLogp.length)).toEqual(
      one.record.trajectories.map((t) => t.newLogp.length),
    );
    two.record.trajectories.forEach((t, i) => {
      expect(t.newLogp.length).toBeGreaterThan(0);
      t.newLogp.forEach((logp, k) => {
        expect(logp).toBeCloseTo(one.record.trajectories[i]?.newLogp[k] as number, 3);
      });
    });
  });

  it("checks agreement on the full log-probs while the ratio uses the sampled ones", async () => {
    const base = createPolicy(TINY_MODEL, 1);
    const temperature = config().rollout.temperature;
    // as if drawn from a nucleus: sampled log-probs above the full ones, which the trainer reproduces
    const nucleus = batchOf(0).map((t) => {
      const logp = base.logProbs([Int32Array.from(t.tokenIds)], temperature)[0]!;
      const full = t.lossMask.map((m, k) => (m ? (logp[k] as number) : 0));
      return {
        ...t,
        behaviorLogprobs: "sampled" as const,
        logprobs: full.map((l) => (l ? l + 0.3 : 0)),
        fullLogprobs: full,
      };
    });
    base.dispose();
    await deliver(transport, nucleus);
    const lines: StepMetrics[] = [];
    await runTrainer(config(), transport, { waitSeconds: 0, maxStepsThisRun: 1, metrics: (l) => void lines.push(l) });
    expect(lines[0]?.metrics["policy/logp_gap_fresh"]).toBeLessThan(1e-4);
    expect(lines[0]?.metrics["policy/logp_gap_alarm"]).toBe(0);
    // ratio exp(full - sampled) = exp(-0.3) < 1 - clipLow on every token: all below the clip range
    expect(lines[0]?.metrics["policy/approx_kl"]).toBeGreaterThan(0.01);
  });

  it("rejects malformed events with the failing field and trains the rest", async () => {
    const info: StepInfo[] = [];
    await transport.queue("trajectories").send(JSON.stringify({ schemaVersion: 1, trajectoryId: "x" }));
    await deliver(transport, batchOf(0));
    await runTrainer(config(), transport, {
      waitSeconds: 0,
      maxStepsThisRun: 1,
      onStep: (s) => info.push(s),
    });
    expect(info[0]?.trajectories).toBe(4);
    expect(info[0]?.metrics["totals/rejected"]).toBeGreaterThanOrEqual(1);
    // handed back with its reason (fail), neither trained nor deleted: it ends in the dead-letter queue
    expect((await transport.queue("trajectories").approximateDepth()).visible).toBe(1);
  });
});
