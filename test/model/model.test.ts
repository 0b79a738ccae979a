import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import {
  createPolicy,
  DecoderError,
  initBackend,
  logProbOf,
  ModelInputError,
  parameterShapes,
  type TransformerPolicy,
} from "../../shared/model/index.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import { SMALL, tokens } from "./support.ts";

beforeAll(async () => {
  await initBackend("wasm");
});

/** Mean negative log-likelihood over the real tokens of the micro-batch (padding cells are 0). */
function nll(count: number) {
  return (logp: tf.Tensor2D) => tf.div(tf.neg(tf.sum(logp)), count) as tf.Scalar;
}

/**
 * Generates along fixed token sequences with the KV-cache decoder, continuous-batching style:
 * sequence i joins after `joinAt[i]` steps with a prompt of `promptLens[i]` tokens, and leaves when
 * it is done. Returns the log-prob of every teacher-forced token after its prompt.
 */
function decodeLogProbs(
  policy: TransformerPolicy,
  seqs: Int32Array[],
  promptLens: number[],
  joinAt: number[],
  temperature: number,
): Float32Array[] {
  const decoder = policy.createDecoder(seqs.length);
  const out = seqs.map((s) => new Float32Array(s.length));
  const slotOf = new Map<number, number>();
  const next = new Array<number>(seqs.length).fill(0);
  for (let tick = 0; slotOf.size > 0 || tick <= Math.max(...joinAt); tick++) {
    seqs.forEach((seq, i) => {
      if (joinAt[i] !== tick) return;
      const { slot, logits } = decoder.add([...seq.subarray(0, promptLens[i])]);
      out[i]![promptLens[i]!] = logProbOf(logits, seq[promptLens[i]!]!, temperature);
      next[i] = promptLens[i]!;
      slotOf.set(i, slot);
    });
    const members = [...slotOf.keys()].filter((i) => next[i]! + 1 < seqs[i]!.length);
    for (const i of [...slotOf.keys()]) {
      if (!members.includes(i)) {
        decoder.remove(slotOf.get(i)!);
        slotOf.delete(i);
      }
    }
    if (members.length === 0) continue;
    const logits = decoder.step(
      members.map((i) => slotOf.get(i)!),
      members.map((i) => seqs[i]![next[i]!]!),
    );
    members.forEach((i, k) => {
      next[i]! += 1;
      out[i]![next[i]!] = logProbOf(logits[k]!, seqs[i]![next[i]!]!, temperature);
    });
  }
  decoder.dispose();
  return out;
}

describe("rollout/trainer agreement", () => {
  it.each([1, 0.7])("training-path log-probs equal KV-cache decoding within 1e-4 (temperature %s)", (temperature) => {
    const policy = createPolicy(SMALL, 11);
    const seqs = [tokens(20, 1), tokens(9, 2), tokens(31, 3), tokens(14, 4)];
    const promptLens = [5, 1, 12, 3];
    const joinAt = [0, 0, 2, 5];
    const fromTrainer = policy.logProbs(seqs, temperature);
    const fromDecoder = decodeLogProbs(policy, seqs, promptLens, joinAt, temperature);
    let compared = 0;
    seqs.forEach((seq, i) => {
      expect(fromTrainer[i]![0]).toBe(0);
      for (let t = promptLens[i]!; t < seq.length; t++) {
        expect(Math.abs(fromTrainer[i]![t]! - fromDecoder[i]![t]!)).toBeLessThan(1e-4);
        expect(fromTrainer[i]![t]!).toBeLessThan(0);
        compared += 1;
      }
    });
    expect(compared).toBe(20 - 5 + 9 - 1 + 31 - 12 + 14 - 3);
    policy.dispose();
  });

  it.each([
    ["1 kv head per 4 query heads", { kvHeads: 1 }],
    ["4 kv heads per 4 query heads", { kvHeads: 4 }],
    ["tied embeddings", { tieEmbeddings: true }],
    ["q/k/v biases", { qkvBias: true }],
    ["head size 6 (the decoder's plain-JS kernels)", { dModel: 24 }],
  ])("agrees with the decoder with %s", (_, variant) => {
    const policy = createPolicy({ ...SMALL, ...variant }, 12);
    const seqs = [tokens(18, 5), tokens(11, 6)];
    const promptLens = [4, 2];
    const fromTrainer = policy.logProbs(seqs, 1);
    const fromDecoder = decodeLogProbs(policy, seqs, promptLens, [0, 1], 1);
    seqs.forEach((seq, i) => {
      for (let t = promptLens[i]!; t < seq.length; t++)
        expect(Math.abs(fromTrainer[i]![t]! - fromDecoder[i]![t]!)).toBeLessThan(1e-4);
    });
    policy.dispose();
  });

  it("with tied embeddings, stores no lm_head and takes the logits from the embedding table", () => {
    const policy = createPolicy({ ...SMALL, tieEmbeddings: true }, 13);
    expect([...policy.params.keys()]).not.toContain("lm_head");
    expect([...policy.params.keys()]).toEqual(parameterShapes(policy.config).map((p) => p.name));
    // The logits are the hidden state against each token's own embedding row.
    const hidden = tf.randomNormal([2, SMALL.dModel], 0, 1, "float32", 3) as tf.Tensor2D;
    const embed = policy.params.get("embed")!;
    const expected = tf.matMul(hidden, embed, false, true);
    const logits = policy.head(hidden);
    expect(tf.max(tf.abs(tf.sub(logits, expected))).dataSync()[0]).toBeLessThan(1e-6);
    tf.dispose([hidden, expected, logits]);
    policy.dispose();
  });

  it("log-probs of a sequence do not depend on what it is batched with", () => {
    const policy = createPolicy(SMALL, 3);
    const alone = policy.logProbs([tokens(17, 9)], 1)[0]!;
    const batched = policy.logProbs([tokens(40, 1), tokens(17, 9), tokens(2, 5)], 1)[1]!;
    for (let t = 0; t < alone.length; t++) expect(Math.abs(alone[t]! - batched[t]!)).toBeLessThan(1e-5);
    policy.dispose();
  });
});

describe("training", () => {
  it("keeps the tensor count flat across steps and moves the weights", () => {
    const policy = createPolicy(SMALL, 5, { optimizer: { learningRate: 1e-2, microBatchTokens: 40 } });
    const seqs = [tokens(30, 1), tokens(25, 2), tokens(12, 3)];
    const before = policy.values();
    const seenRows: number[] = [];
    const loss = (logp: tf.Tensor2D, rows: readonly number[]) => {
      seenRows.push(...rows);
      return nll(64)(logp);
    };
    const first = policy.trainStep(seqs, 1, loss);
    const count = tf.memory().numTensors;
    const losses = [first.loss];
    for (let i = 0; i < 4; i++) {
      losses.push(policy.trainStep(seqs, 1, loss).loss);
      expect(tf.memory().numTensors).toBe(count);
    }
    // microBatchTokens 40 splits the three rows over several micro-batches, each row exactly once per step.
    expect(seenRows.slice(0, 3).sort()).toEqual([0, 1, 2]);
    expect(seenRows.length).toBe(15);
    expect(first.gradNorm).toBeGreaterThan(0);
    expect(losses[4]!).toBeLessThan(losses[0]!);
    const after = policy.values();
    for (const [name, w] of before) {
      const moved = w.some((v, i) => v !== after.get(name)![i]);
      expect(moved, `${name} moved`).toBe(true);
    }
    policy.dispose();
  });

  it.each([
    ["untied head", { tieEmbeddings: false }],
    ["tied embeddings", { tieEmbeddings: true }],
    ["q/k/v biases", { qkvBias: true }],
  ])("matches finite differences of the loss (%s)", (_, variant) => {
    const policy = createPolicy({ ...SMALL, dModel: 16, ffnHidden: 24, layers: 2, ...variant }, 21);
    const seqs = [tokens(7, 1), tokens(5, 2)];
    const temperature = 0.8;
    // Weighted sum so the check also covers a non-uniform upstream gradient.
    const loss = (logp: tf.Tensor2D) =>
      tf.sum(
        tf.mul(
          logp,
          tf.tensor2d(
            Float32Array.from({ length: logp.size }, (_, i) => 1 + (i % 3)),
            logp.shape,
          ),
        ),
      ) as tf.Scalar;
    const { grads } = policy.gradients(seqs, temperature, loss);
    const objective = () => {
      const lp = policy.logProbs(seqs, temperature);
      let total = 0;
      const width = 7;
      lp.forEach((row, b) => {
        row.forEach((v, t) => {
          total += v * (1 + ((b * width + t) % 3));
        });
      });
      return total;
    };
    const eps = 1e-2;
    let checked = 0;
    for (const [name, variable] of policy.params) {
      const g = grads.get(name)!;
      // The two largest-magnitude entries of each parameter: big enough to rise above float32 noise.
      const order = [...g.keys()].sort((a, b) => Math.abs(g[b]!) - Math.abs(g[a]!)).slice(0, 2);
      for (const index of order) {
        const base = Float32Array.from(variable.dataSync() as Float32Array);
        const set = (delta: number) => {
          const w = Float32Array.from(base);
          w[index]! += delta;
          const t = tf.tensor(w, variable.shape);
          variable.assign(t);
          t.dispose();
        };
        set(eps);
        const up = objective();
        set(-eps);
        const down = objective();
        set(0);
        const numeric = (up - down) / (2 * eps);
        expect(Math.abs(numeric - g[index]!), `${name}[${index}] analytic ${g[index]} numeric ${numeric}`).toBeLessThan(
          2e-3 + 2e-2 * Math.abs(numeric),
        );
        checked += 1;
      }
    }
    expect(checked).toBe(2 * policy.params.size);
    policy.dispose();
  });

  it("learns to copy an earlier span of its context (content-addressed attention, as answers need)", () => {
    // "1 a1..a8 2 a1..a8" with random a: the second span is predictable only by attending back and copying.
    const policy = createPolicy({ ...SMALL, dModel: 64, ffnHidden: 96 }, 1, { optimizer: { learningRate: 3e-3 } });
    const span = 8;
    const random = seededRandom(7);
    const randomToken = () => 10 + Math.floor(random() * 64);
    const batch = () =>
      Array.from({ length: 16 }, () => {
        const a = Array.from({ length: span }, randomToken);
        return Int32Array.from([1, ...a, 2, ...a]);
      });
    const width = 2 * span + 2;
    const copied = tf.tensor2d(
      Float32Array.from({ length: 16 * width }, (_, i) => (i % width >= span + 2 ? 1 : 0)),
      [16, width],
    );
    const copyLoss = (logp: tf.Tensor2D) => tf.div(tf.neg(tf.sum(tf.mul(logp, copied))), 16 * span) as tf.Scalar;
    const heldOutLoss = () => {
      const lp = policy.logProbs(batch(), 1);
      return lp.reduce((sum, row) => sum - row.slice(span + 2).reduce((a, b) => a + b, 0), 0) / (16 * span);
    };
    const before = heldOutLoss();
    for (let step = 0; step < 150; step++) policy.trainStep(batch(), 1, copyLoss);
    const after = heldOutLoss();
    // Chance is ln 64 ≈ 4.16 nats; a model that copies gets close to 0.
    expect(before).toBeGreaterThan(4);
    expect(after).toBeLessThan(0.5);
    copied.dispose();
    policy.dispose();
  });

  it("snapshot is frozen and independent of later steps", () => {
    const policy = createPolicy(SMALL, 8, { optimizer: { learningRate: 1e-2 } });
    const seqs = [tokens(12, 1)];
    const reference = policy.snapshot();
    const before = reference.logProbs(seqs, 1)[0]!;
    policy.trainStep(seqs, 1, nll(11));
    expect(reference.logProbs(seqs, 1)[0]).toEqual(before);
    expect(policy.logProbs(seqs, 1)[0]).not.toEqual(before);
    expect(() => reference.trainStep(seqs, 1, nll(11))).toThrow(/frozen snapshot/);
    reference.dispose();
    policy.dispose();
  });

  it("rejects bad input with the failing field", () => {
    const policy = createPolicy(SMALL, 1);
    expect(() => policy.logProbs([Int32Array.of(1, 2, 300)], 1)).toThrow(ModelInputError);
    expect(() => policy.logProbs([Int32Array.of(1, 2, 300)], 1)).toThrow(/sequences\[0\]\[2\]: token 300/);
    expect(() => policy.logProbs([tokens(65, 1)], 1)).toThrow(/exceed the context length 64/);
    expect(() => policy.logProbs([tokens(3, 1)], 0)).toThrow(/temperature/);
    expect(() => policy.trainStep([Int32Array.of(1)], 1, nll(1))).toThrow(/at least 2/);
    policy.dispose();
  });

  it("initialises deterministically from the seed", () => {
    const a = createPolicy(SMALL, 42);
    const b = createPolicy(SMALL, 42);
    const c = createPolicy(SMALL, 43);
    const seq = [tokens(10, 1)];
    expect(a.logProbs(seq, 1)).toEqual(b.logProbs(seq, 1));
    expect(a.logProbs(seq, 1)).not.toEqual(c.logProbs(seq, 1));
    for (const p of [a, b, c]) p.dispose();
  });
});

describe("decoder", () => {
  it("switches weights between steps without dropping sequences in flight", () => {
    const policyA = createPolicy(SMALL, 1);
    const policyB = createPolicy(SMALL, 2, { version: 7 });
    const seq = tokens(16, 3);
    const run = (switchTo: TransformerPolicy | undefined) => {
      const decoder = policyA.createDecoder(2);
      const { slot } = decoder.add([...seq.subarray(0, 4)]);
      const out: Float32Array[] = [];
      for (let t = 4; t < 12; t++) {
        if (t === 8 && switchTo) decoder.setPolicy(switchTo);
        out.push(decoder.step([slot], [seq[t]!])[0]!);
      }
      return { out, decoder, slot };
    };
    const plain = run(undefined);
    expect(plain.decoder.policyVersion).toBe(0);
    // Same weights under a new version label: the recomputed cache gives the same logits (up to
    // the prefill path's float order), new version reported.
    const relabelled = policyA.withVersion(5);
    const same = run(relabelled);
    expect(same.decoder.policyVersion).toBe(5);
    same.out.forEach((l, i) => {
      l.forEach((v, j) => {
        expect(Math.abs(v - (plain.out[i]![j] as number))).toBeLessThan(1e-4);
      });
    });
    // Different weights: identical before the switch, different after, and the sequence continues.
    const switched = run(policyB);
    expect(switched.decoder.policyVersion).toBe(7);
    for (let i = 0; i < 4; i++) expect(switched.out[i]).toEqual(plain.out[i]);
    for (let i = 4; i < 8; i++) expect(switched.out[i]).not.toEqual(plain.out[i]);
    expect(switched.decoder.active).toBe(1);
    // No token belongs to two policies: after the switch every distribution is exactly policy B's
    // over the whole prefix (the cache was recomputed), not B's weights over A's cache.
    for (let i = 4; i < 8; i++) {
      const t = 4 + i; // out[i] is the distribution of seq[t + 1] after consuming seq[t]
      const expected = policyB.logProbs([seq.subarray(0, t + 2)], 1)[0]![t + 1]!;
      expect(Math.abs(logProbOf(switched.out[i]!, seq[t + 1]!, 1) - expected)).toBeLessThan(1e-4);
    }
    // A sequence that starts after the switch is decoded entirely by the new weights.
    const fresh = switched.decoder.add([...seq.subarray(0, 6)]);
    const expected = policyB.logProbs([seq.subarray(0, 7)], 1)[0]![6]!;
    expect(Math.abs(logProbOf(fresh.logits, seq[6]!, 1) - expected)).toBeLessThan(1e-4);
    for (const p of [policyA, policyB, relabelled]) p.dispose();
  });

  it("reports misuse clearly", () => {
    const policy = createPolicy(SMALL, 1);
    const decoder = policy.createDecoder(1);
    expect(() => decoder.add([])).toThrow(/at least 1/);
    expect(() => decoder.add([...tokens(65, 1)])).toThrow(/context length 64/);
    const { slot } = decoder.add([1, 2, 3]);
    expect(() => decoder.add([1])).toThrow(DecoderError);
    expect(() => decoder.step([slot], [300])).toThrow(/outside the vocabulary/);
    expect(() => decoder.step([slot + 1], [1])).toThrow(/not in use/);
    expect(() => decoder.step([slot, slot], [1, 2])).toThrow(/appears twice/);
    expect(() => decoder.step([slot], [])).toThrow(/one token per slot/);
    const other = createPolicy({ ...SMALL, layers: 3 }, 1);
    expect(() => decoder.setPolicy(other)).toThrow(/config.layers differs/);
    decoder.remove(slot);
    expect(decoder.active).toBe(0);
    const full = decoder.add([...tokens(63, 2)]);
    decoder.step([full.slot], [1]);
    expect(() => decoder.step([full.slot], [1])).toThrow(/is full/);
    other.dispose();
    expect(() => decoder.setPolicy(other)).toThrow(/is disposed/);
    policy.dispose();
    expect(() => decoder.step([full.slot], [1])).toThrow(/was disposed while this decoder still uses it/);
  });
});
