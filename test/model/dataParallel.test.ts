import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../shared/log.ts";
import {
  DataParallelError,
  DataParallelTrainer,
  type ShardLossModule,
  shardRows,
} from "../../shared/model/dataParallel.ts";
import { createPolicy, initBackend, type TransformerPolicy } from "../../shared/model/index.ts";
import { DEFAULT_PPO_PARAMS } from "../../shared/rl/ppo.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import nllShardLoss, { type NllInput } from "../../trainer-image/sft/nllShard.ts";
import type { LossRow } from "../../trainer-image/trainer/loss.ts";
import ppoShardLoss, { type PpoShardInput } from "../../trainer-image/trainer/ppoShard.ts";
import crashShardLoss, { type CrashInput } from "../support/crashShard.ts";
import { SMALL, tokens } from "./support.ts";

beforeAll(async () => {
  await initBackend("wasm");
});

const OPTIMIZER = { learningRate: 1e-2, microBatchTokens: 64 };
/**
 * Weights of 1 and 2 threads after a few steps may differ by this much. Measured: 6.6e-7 (NLL, 4
 * steps) and 1.4e-6 (PPO, 3 steps): the shards' gradients are summed in another order (≈1e-7
 * relative), then Adam. A lost, doubled or unapplied shard moves weights by about the learning
 * rate (an early Adam step is ≈ lr·sign(g)), so lr/100 separates the two with ~70× margin.
 */
const WEIGHT_TOLERANCE = OPTIMIZER.learningRate / 100;
/** Rows of unequal lengths, so shards and micro-batches differ between 1 and 2 threads. */
const LENGTHS = [40, 12, 33, 64, 7, 25, 50, 18];
const batchOf = (step: number) => LENGTHS.map((n, i) => tokens(n, 10 * step + i));

function maxAbsDiff(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  let worst = 0;
  for (const [name, x] of a) {
    const y = b.get(name) as Float32Array;
    for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs((x[i] as number) - (y[i] as number)));
  }
  return worst;
}

function bitwiseEqual(a: Map<string, Float32Array>, b: Map<string, Float32Array>): boolean {
  for (const [name, x] of a) {
    const y = b.get(name) as Float32Array;
    if (
      Buffer.compare(
        Buffer.from(x.buffer, x.byteOffset, x.byteLength),
        Buffer.from(y.buffer, y.byteOffset, y.byteLength),
      ) !== 0
    )
      return false;
  }
  return true;
}

/** `steps` steps of the same batches with 1 and with `threads` threads, from the same init. */
async function sideBySide<I, S>(
  loss: ShardLossModule<I, S>,
  steps: number,
  inputOf: (step: number, sequences: Int32Array[], policy: TransformerPolicy) => I,
  threads = 2,
) {
  const one = createPolicy(SMALL, 5, { optimizer: OPTIMIZER });
  const two = createPolicy(SMALL, 5, { optimizer: OPTIMIZER });
  const single = await DataParallelTrainer.start(one, { threads: 1, loss });
  const parallel = await DataParallelTrainer.start(two, { threads, loss });
  const results: Array<{
    one: Awaited<ReturnType<typeof single.trainStep>>;
    two: Awaited<ReturnType<typeof single.trainStep>>;
  }> = [];
  let tensorsAfterFirst = 0;
  try {
    for (let step = 0; step < steps; step++) {
      if (step === 1) tensorsAfterFirst = tf.memory().numTensors;
      const sequences = batchOf(step);
      // Inputs come from the one-thread policy, so both runs see identical inputs.
      const input = inputOf(step, sequences, one);
      results.push({
        one: await single.trainStep(sequences, 1, input),
        two: await parallel.trainStep(sequences, 1, input),
      });
    }
    // no tensor leaks from step to step (this thread's shard, the summed step)
    expect(tf.memory().numTensors).toBe(tensorsAfterFirst);
    const replicas = await parallel.replicaValues();
    return { results, oneValues: one.values(), twoValues: two.values(), replicas, twoStep: two.step };
  } finally {
    await parallel.close();
    one.dispose();
    two.dispose();
  }
}

describe("shardRows", () => {
  it("balances cost, longest first, each shard in ascending row order", () => {
    // costs 9, 1, 4, 4, 2: 9 → shard 0; 4 (row 2) → 1; 4 (row 3) → 1 (4 < 9); 2 → 1 (8 < 9); 1 → 1? no: 10 > 9 → 0
    expect(shardRows([9, 1, 4, 4, 2], 2)).toEqual([
      [0, 1],
      [2, 3, 4],
    ]);
    expect(shardRows([5], 2)).toEqual([[0], []]);
    expect(shardRows([1, 1, 1, 1], 2)).toEqual([
      [0, 2],
      [1, 3],
    ]);
  });
});

describe("data-parallel training over two threads", () => {
  it("SFT's loss: weights equal one thread's within float tolerance, the replica equals the main policy bitwise", async () => {
    const steps = 4;
    const { results, oneValues, twoValues, replicas, twoStep } = await sideBySide<NllInput, Record<string, never>>(
      nllShardLoss,
      steps,
      (step, sequences) => {
        const weights = sequences.map((s, i) => Float32Array.from(s, (_, t) => (t > (step + i) % 5 ? 1 : 0)));
        return { weights, totalWeight: weights.reduce((sum, w) => sum + w.reduce((a, b) => a + b, 0), 0) };
      },
    );
    for (const { one, two } of results) {
      expect(two.threads).toBe(2);
      expect(two.loss).toBeCloseTo(one.loss, 5);
      expect(Math.abs(two.gradNorm - one.gradNorm) / one.gradNorm).toBeLessThan(1e-5);
    }
    expect(maxAbsDiff(oneValues, twoValues)).toBeLessThan(WEIGHT_TOLERANCE);
    // the weights moved (so the comparison above is not of two untouched inits)
    const init = createPolicy(SMALL, 5);
    expect(maxAbsDiff(init.values(), twoValues)).toBeGreaterThan(1e-3);
    init.dispose();
    expect(replicas).toHaveLength(1);
    expect(replicas[0]?.step).toBe(twoStep);
    expect(bitwiseEqual(replicas[0]?.values as Map<string, Float32Array>, twoValues)).toBe(true);
  });

  it("the PPO loss: weights, loss, gradient norm and the step's stats equal one thread's within tolerance", async () => {
    const steps = 3;
    /** Loss rows around the current policy's log-probs: ratios near 1, some clipped, importance weights on two rows. */
    const inputOf = (step: number, sequences: Int32Array[], policy: TransformerPolicy): PpoShardInput => {
      const random = seededRandom(100 + step);
      const current = policy.logProbs(sequences, 1);
      const rows: LossRow[] = sequences.map((s, i) => {
        const lp = current[i] as Float32Array;
        const lossMask = Array.from(s, (_, t) => (t > 0 && random() > 0.2 ? 1 : 0));
        const advantage = random() * 2 - 1;
        return {
          oldLogp: Array.from(lp, (x, t) => (t === 0 ? 0 : x + (random() - 0.5) * 0.6)),
          ...(i % 4 === 1 ? { weights: Array.from(s, () => 0.5 + random()) } : {}),
          refLogp: Float32Array.from(lp, (x) => x - random() * 0.1),
          advantages: Array.from(s, () => advantage),
          lossMask,
          fresh: lossMask.map((m, t) => (m === 1 && t % 3 !== 0 ? 1 : 0)),
          fullLogp: Array.from(lp, (x) => x + (random() - 0.5) * 0.02),
        };
      });
      const tokenCount = rows.reduce((sum, r) => sum + r.lossMask.reduce((a, b) => a + b, 0), 0);
      return { rows, params: { ...DEFAULT_PPO_PARAMS, klCoef: 0.1 }, tokens: tokenCount, captureLogp: true };
    };
    const { results, oneValues, twoValues, replicas } = await sideBySide(ppoShardLoss, steps, inputOf);
    for (const { one, two } of results) {
      expect(two.threads).toBe(2);
      expect(Math.abs(two.loss - one.loss)).toBeLessThan(1e-5 * Math.max(1, Math.abs(one.loss)));
      expect(Math.abs(two.gradNorm - one.gradNorm) / one.gradNorm).toBeLessThan(1e-5);
      for (const key of ["pg", "kl", "approxKl"] as const)
        expect(Math.abs(two.stats.sums[key] - one.stats.sums[key])).toBeLessThan(
          1e-4 * Math.max(1, Math.abs(one.stats.sums[key])),
        );
      expect(two.stats.sums.clipped).toBe(one.stats.sums.clipped);
      // every row got its gap from exactly one shard
      expect([...two.stats.rowFresh]).toEqual([...one.stats.rowFresh]);
      two.stats.rowGap.forEach((gap, i) => {
        expect(gap).toBeCloseTo(one.stats.rowGap[i] as number, 4);
      });
      // the trainer's log-probs of every row came back (step record), from both shards
      expect(two.stats.logp.map(([row]) => row).sort((a, b) => a - b)).toEqual(LENGTHS.map((_, i) => i));
      const mine = new Map(one.stats.logp);
      for (const [row, logp] of two.stats.logp) {
        const reference = mine.get(row) as Float32Array;
        for (let t = 0; t < (LENGTHS[row] as number); t++) expect(logp[t]).toBeCloseTo(reference[t] as number, 4);
      }
    }
    expect(results.some((r) => r.one.stats.sums.clipped > 0)).toBe(true);
    expect(maxAbsDiff(oneValues, twoValues)).toBeLessThan(WEIGHT_TOLERANCE);
    expect(bitwiseEqual(replicas[0]?.values as Map<string, Float32Array>, twoValues)).toBe(true);
  });
});

/** Rejects when `promise` has not settled within `seconds`: a hang fails the test instead of stalling it. */
function within<T>(promise: Promise<T>, seconds: number): Promise<T> {
  return Promise.race([
    promise,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`no answer within ${seconds} s`)), seconds * 1000).unref(),
    ),
  ]);
}

describe("data-parallel log-probs", () => {
  it("under the trained weights and the frozen reference, sharded, equal one thread's, row by row", async () => {
    const policy = createPolicy(SMALL, 5, { optimizer: OPTIMIZER });
    const reference = createPolicy(SMALL, 11, { trainable: false });
    const parallel = await DataParallelTrainer.start(policy, { threads: 2, loss: crashShardLoss, reference });
    try {
      // a step first, so the replica's trained weights are not the initial ones
      await parallel.trainStep(batchOf(0), 1, { tokens: 256 });
      const sequences = batchOf(1);
      for (const [which, source] of [
        ["policy", policy],
        ["reference", reference],
      ] as const) {
        const expected = source.logProbs(sequences, 0.7);
        const got = await parallel.logProbs(sequences, 0.7, which);
        expect(got.map((row) => row.length)).toEqual(LENGTHS);
        got.forEach((row, i) => {
          row.forEach((logp, t) => {
            expect(logp).toBeCloseTo(expected[i]?.[t] as number, 5);
          });
        });
      }
      // the two sources differ, so a swapped source would fail above
      expect(policy.logProbs(sequences, 0.7)[0]?.[5]).not.toBeCloseTo(
        reference.logProbs(sequences, 0.7)[0]?.[5] as number,
        2,
      );
    } finally {
      await parallel.close();
      policy.dispose();
      reference.dispose();
    }
  });
});

describe("data-parallel failures", () => {
  const input = (extra: Partial<CrashInput> = {}): CrashInput => ({ tokens: 256, ...extra });

  async function started(lines: string[] = []) {
    const policy = createPolicy(SMALL, 9, { optimizer: OPTIMIZER });
    const log = createLogger({ role: "test" }, { write: (line: string) => lines.push(line) });
    const parallel = await DataParallelTrainer.start(policy, { threads: 2, loss: crashShardLoss, log });
    return { policy, parallel };
  }

  it("a replica that dies mid-step fails that step with a clear error, leaves the weights unchanged, and later steps run on one thread", async () => {
    const lines: string[] = [];
    const { policy, parallel } = await started(lines);
    try {
      await parallel.trainStep(batchOf(0), 1, input());
      const before = policy.values();
      const failed = within(parallel.trainStep(batchOf(1), 1, input({ exitInReplica: true })), 30);
      await expect(failed).rejects.toThrow(DataParallelError);
      await expect(failed).rejects.toThrow(/replica 1 exited \(code 7\).*not applied \(weights unchanged\)/);
      expect(bitwiseEqual(before, policy.values())).toBe(true);
      expect(policy.step).toBe(1);
      const next = await within(parallel.trainStep(batchOf(2), 1, input()), 30);
      expect(next.threads).toBe(1);
      expect(next.stats.calls).toBeGreaterThan(0);
      expect(policy.step).toBe(2);
      expect(lines.join("")).toMatch(/replica lost; later steps run on this thread alone/);
    } finally {
      await parallel.close();
      policy.dispose();
    }
  });

  it("a replica killed between steps: the next step runs on one thread, with a warning", async () => {
    const lines: string[] = [];
    const { policy, parallel } = await started(lines);
    try {
      await parallel.killReplicas();
      const next = await within(parallel.trainStep(batchOf(0), 1, input()), 30);
      expect(next.threads).toBe(1);
      expect(lines.join("")).toMatch(/exited \(code 1\)/);
    } finally {
      await parallel.close();
      policy.dispose();
    }
  });

  it("a shard that throws in the replica fails the step with its message; both replicas stay unchanged and in use", async () => {
    const { policy, parallel } = await started();
    try {
      const before = policy.values();
      await expect(within(parallel.trainStep(batchOf(0), 1, input({ throwInReplica: true })), 30)).rejects.toThrow(
        /shard failed in a replica: Error: loss refused in the replica/,
      );
      expect(bitwiseEqual(before, policy.values())).toBe(true);
      const replica = (await parallel.replicaValues())[0];
      expect(replica?.step).toBe(0);
      expect(bitwiseEqual(before, replica?.values as Map<string, Float32Array>)).toBe(true);
      const next = await parallel.trainStep(batchOf(1), 1, input());
      expect(next.threads).toBe(2);
      expect(
        bitwiseEqual(policy.values(), (await parallel.replicaValues())[0]?.values as Map<string, Float32Array>),
      ).toBe(true);
    } finally {
      await parallel.close();
      policy.dispose();
    }
  });

  it("a batch one thread refuses is refused the same way, before any thread computes", async () => {
    const { policy, parallel } = await started();
    try {
      await expect(parallel.trainStep([], 1, input())).rejects.toThrow(/sequences is empty/);
      await expect(parallel.trainStep([tokens(5, 1), Int32Array.of(1, 99_999)], 1, input())).rejects.toThrow(
        /sequences\[1\]\[1\]: token 99999 is outside the vocabulary/,
      );
      expect(policy.step).toBe(0);
      expect((await parallel.trainStep(batchOf(0), 1, input())).threads).toBe(2);
    } finally {
      await parallel.close();
      policy.dispose();
    }
  });

  it("a loss module a replica cannot load fails start() with the reason", async () => {
    const policy = createPolicy(SMALL, 9);
    const broken = { ...crashShardLoss, url: new URL("./no-such-loss.ts", import.meta.url).href };
    await expect(within(DataParallelTrainer.start(policy, { threads: 2, loss: broken }), 30)).rejects.toThrow(
      /replica 1 could not start: .*no-such-loss/,
    );
    policy.dispose();
  });

  it("a step changed outside the coordinator is copied to the replica before the next step", async () => {
    const { policy, parallel } = await started();
    try {
      // trained here directly (one thread): the replica is one step behind until the next parallel step
      const loss = crashShardLoss.build(input());
      policy.trainStep(batchOf(0), 1, loss.loss);
      await parallel.trainStep(batchOf(1), 1, input());
      const replica = (await parallel.replicaValues())[0];
      expect(replica?.step).toBe(2);
      expect(bitwiseEqual(policy.values(), replica?.values as Map<string, Float32Array>)).toBe(true);
    } finally {
      await parallel.close();
      policy.dispose();
    }
  });
});
