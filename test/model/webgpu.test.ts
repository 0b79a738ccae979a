import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { ModelConfig } from "../../shared/config/policy.ts";
import { drawnTokens, drawOnDevice } from "../../shared/model/deviceSampling.ts";
import { initBackend, TransformerPolicy } from "../../shared/model/index.ts";
import { drawToken } from "../../shared/model/sampling.ts";
import { initialValues } from "../../shared/model/transformer.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import { runProcess } from "../support/cli.ts";
import { requireOrSkip, webgpuAdapterMissing } from "../support/requirements.ts";
import { SMALL, tokens } from "./support.ts";

/**
 * The webgpu backend (TF.js's webgpu kernels on Dawn) against the cpu backend, in one process:
 * the same weights on each, the cpu side run by switching TF.js's backend around it. On this
 * machine the adapter is Mesa's lavapipe (Vulkan on the CPU): a correctness path, not a speed.
 *
 * Tolerances (float32 on both sides; the sums run in a different order on the device):
 * log-probs and logits within 1e-4 absolute, loss and gradient norm within 1e-4 relative, and
 * after three Adam steps every weight within 2e-6 of the cpu run's (lr 1e-4: each step moves a
 * weight by up to 1e-4, so this is 2% of one step). Measured on lavapipe: log-probs within 1e-6,
 * logits 1.2e-7, weights after three steps 1.2e-7, gradient norms 5e-8 relative.
 */

const hasAdapter = requireOrSkip("webgpu.test.ts", "webgpu backend numerics against cpu", webgpuAdapterMissing());

const CONFIG = ModelConfig.parse({ ...SMALL, qkvBias: true, tieEmbeddings: false });
const TRAIN = { learningRate: 1e-4, gradClip: 1 };

/** Initial weights with non-zero q/k/v biases, so the bias path is compared too. */
function weights(seed: number): Map<string, Float32Array> {
  const values = initialValues(CONFIG, seed);
  for (const [name, v] of values)
    if (name.endsWith("bqkv")) for (let i = 0; i < v.length; i++) v[i] = ((i % 7) - 3) * 0.01;
  return values;
}

/** Runs `fn` with the cpu backend current (tensors it makes live there), then switches back to webgpu. */
async function onCpu<T>(fn: () => T): Promise<T> {
  await tf.setBackend("cpu");
  try {
    return fn();
  } finally {
    await tf.setBackend("webgpu");
  }
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let worst = 0;
  for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i]! - b[i]!));
  return worst;
}

/** Mean negative log-likelihood of the predicted cells (cell 0 of each row is padding, 0). */
function nll(logp: tf.Tensor2D): tf.Scalar {
  return tf.neg(tf.div(tf.sum(logp), logp.size)) as tf.Scalar;
}

const SEQUENCES = [tokens(23, 1), tokens(9, 2), tokens(40, 3)];

describe.skipIf(!hasAdapter)("webgpu backend against cpu (same weights)", () => {
  beforeAll(async () => {
    const info = await initBackend("webgpu");
    expect(info.name).toBe("webgpu");
    expect(info.adapter?.description.length).toBeGreaterThan(0);
    expect(info.adapter?.limits.maxStorageBufferBindingSize).toBeGreaterThan(0);
  }, 120_000);

  it("per-token log-probs match within 1e-4 at temperatures 1 and 0.7", async () => {
    const values = weights(5);
    const gpu = new TransformerPolicy(CONFIG, values, 0, { trainable: false });
    for (const temperature of [1, 0.7]) {
      const ours = gpu.logProbs(SEQUENCES, temperature);
      const reference = await onCpu(() => {
        const cpu = new TransformerPolicy(CONFIG, values, 0, { trainable: false });
        try {
          return cpu.logProbs(SEQUENCES, temperature);
        } finally {
          cpu.dispose();
        }
      });
      SEQUENCES.forEach((_, i) => {
        expect(maxAbsDiff(ours[i]!, reference[i]!)).toBeLessThan(1e-4);
      });
      // Not vacuous: the predictions are far from uniform and differ between positions.
      expect(Math.min(...reference.flatMap((r) => [...r.slice(1)]))).toBeLessThan(Math.log(1 / CONFIG.vocabSize));
    }
    gpu.dispose();
  });

  it("three Adam steps: losses, gradient norms and the weights after them match, and no tensor leaks", async () => {
    const values = weights(9);
    const run = (policy: TransformerPolicy) => {
      const stats = [0, 1, 2].map(() => policy.trainStep(SEQUENCES, 1, nll));
      return { stats, after: policy.values() };
    };
    const gpu = new TransformerPolicy(CONFIG, values, 0, { trainable: true, optimizer: TRAIN });
    // A burn-in step creates Adam's moments; the count must then stay flat.
    const ours = run(gpu);
    const before = tf.memory().numTensors;
    gpu.trainStep(SEQUENCES, 1, nll);
    expect(tf.memory().numTensors).toBe(before);
    gpu.dispose();
    const reference = await onCpu(() => {
      const cpu = new TransformerPolicy(CONFIG, values, 0, { trainable: true, optimizer: TRAIN });
      try {
        return run(cpu);
      } finally {
        cpu.dispose();
      }
    });
    ours.stats.forEach((s, i) => {
      const r = reference.stats[i]!;
      expect(Math.abs(s.loss - r.loss) / r.loss).toBeLessThan(1e-4);
      expect(Math.abs(s.gradNorm - r.gradNorm) / r.gradNorm).toBeLessThan(1e-4);
    });
    // The steps did something: the loss fell and every matrix moved.
    expect(reference.stats[2]!.loss).toBeLessThan(reference.stats[0]!.loss);
    for (const [name, w] of reference.after) {
      expect(maxAbsDiff(ours.after.get(name)!, w), name).toBeLessThan(2e-6);
      if (name.includes("w_")) expect(maxAbsDiff(values.get(name)!, w), name).toBeGreaterThan(1e-5);
    }
  });

  it("KV-cache decoding: prefill and six steps give the same logits (within 1e-4) and greedy tokens", async () => {
    const values = weights(11);
    const prompts = [[...tokens(12, 4)], [...tokens(5, 6)]];
    const decode = (policy: TransformerPolicy) => {
      const decoder = policy.createDecoder(2);
      const logits: Float32Array[] = [];
      const chosen: number[] = [];
      const slots = prompts.map((prompt) => {
        const added = decoder.add(prompt);
        logits.push(Float32Array.from(added.logits));
        return added.slot;
      });
      let last = logits.map(argmax);
      for (let step = 0; step < 6; step++) {
        const out = decoder.step(slots, last);
        for (const row of out) logits.push(Float32Array.from(row));
        last = out.map(argmax);
        chosen.push(...last);
      }
      decoder.dispose();
      return { logits, chosen };
    };
    const gpu = new TransformerPolicy(CONFIG, values, 0, { trainable: false });
    const ours = decode(gpu);
    gpu.dispose();
    const reference = await onCpu(() => {
      const cpu = new TransformerPolicy(CONFIG, values, 0, { trainable: false });
      try {
        return decode(cpu);
      } finally {
        cpu.dispose();
      }
    });
    expect(ours.chosen).toEqual(reference.chosen);
    ours.logits.forEach((row, i) => {
      expect(maxAbsDiff(row, reference.logits[i]!)).toBeLessThan(1e-4);
    });
  });

  it("draws on the device the token the host draws from the same logits and uniform number", () => {
    const rows = 24;
    const random = seededRandom(21);
    const logits = Float32Array.from({ length: rows * CONFIG.vocabSize }, () => (random() - 0.5) * 16);
    const draws = Array.from({ length: rows }, (_, i) => ({
      temperature: [0, 1, 0.7][i % 3]!,
      topP: i % 2 === 0 ? 0.9 : 1,
      uniform: random(),
    }));
    const input = tf.tensor2d(logits, [rows, CONFIG.vocabSize]);
    const output = drawOnDevice(input, draws);
    const drawn = drawnTokens(output.dataSync() as Float32Array);
    tf.dispose([input, output]);
    draws.forEach((draw, i) => {
      const host = drawToken(logits.subarray(i * CONFIG.vocabSize, (i + 1) * CONFIG.vocabSize), draw);
      expect(drawn[i]!.token).toBe(host.token);
      expect(Math.abs(drawn[i]!.logprob - host.logprob)).toBeLessThan(1e-4);
      expect(Math.abs(drawn[i]!.sampledLogprob - host.sampledLogprob)).toBeLessThan(1e-4);
    });
  });

  it("stays on the device: a training step reads two numbers, log-probs one grid per micro-batch, a decode step its drawn tokens", () => {
    const values = weights(13);
    // Two micro-batches per call (23 + 9 tokens, then 40).
    const policy = new TransformerPolicy(CONFIG, values, 0, {
      trainable: true,
      optimizer: { ...TRAIN, microBatchTokens: 32 },
    });
    expect(countReads(() => policy.trainStep(SEQUENCES, 1, nll))).toEqual([1, 1]); // the loss and the gradient norm
    expect(countReads(() => policy.trainStep(SEQUENCES, 1, nll))).toEqual([1, 1]);
    // one [b, T] grid per micro-batch
    expect(countReads(() => policy.logProbs(SEQUENCES, 1))).toEqual([2 * 23, 40]);
    const tensors = tf.memory().numTensors;
    const decoder = policy.createDecoder(2);
    let slots: number[] = [];
    const draw = { temperature: 1, topP: 0.9, uniform: 0.5 };
    // Each read is the drawn tokens with their two log-probs: 3 numbers per sequence, not [rows, vocab].
    expect(
      countReads(() => {
        slots = [decoder.addAndDraw([...tokens(12, 4)], draw).slot, decoder.addAndDraw([...tokens(5, 6)], draw).slot];
      }),
    ).toEqual([3, 3]);
    expect(countReads(() => decoder.stepAndDraw(slots, [3, 4], [draw, { ...draw, temperature: 0 }]))).toEqual([6]);
    expect(countReads(() => decoder.stepAndDraw(slots, [5, 6], [draw, draw]))).toEqual([6]);
    // New weights: the running sequences' caches are recomputed, and the next step matches a fresh decoder's.
    const next = new TransformerPolicy(CONFIG, weights(14), 1, { trainable: false });
    decoder.setPolicy(next);
    const continued = decoder.step([slots[0]!], [7])[0]!;
    const fresh = next.createDecoder(1);
    const expected = fresh.add([...tokens(12, 4), 3, 5, 7]).logits;
    expect(maxAbsDiff(continued, expected)).toBeLessThan(1e-5);
    fresh.dispose();
    // Prefix cache: the next turn of a removed sequence prefills only its new tokens.
    decoder.remove(slots[1]!);
    const turn = [...tokens(5, 6), 4, 6, 8, 9];
    let extended: Float32Array = new Float32Array(0);
    expect(countReads(() => (extended = decoder.add(turn).logits))).toEqual([CONFIG.vocabSize]);
    // Prefilled: the two prompts (12, 5), both caches again for the new weights (14, 7), the turn's 2 new tokens.
    expect(decoder.prefixStats).toEqual({ hits: 1, reusedTokens: 7, prefilledTokens: 12 + 5 + 14 + 7 + 2 });
    const whole = next.createDecoder(1);
    expect(maxAbsDiff(extended, whole.add(turn).logits)).toBeLessThan(1e-5);
    whole.dispose();
    decoder.dispose();
    next.dispose();
    expect(tf.memory().numTensors).toBe(tensors);
    policy.dispose();
  });
});

/** The sizes (in values) of the host reads (the backend's readSync and read: dataSync, data, arraySync) while `fn` runs. */
function countReads(fn: () => unknown): number[] {
  const backend = tf.backend();
  const { readSync, read } = backend;
  const reads: number[] = [];
  backend.readSync = (dataId) => {
    const values = readSync.call(backend, dataId);
    reads.push(values.length);
    return values;
  };
  backend.read = async (dataId) => {
    const values = await read.call(backend, dataId);
    reads.push(values.length);
    return values;
  };
  try {
    fn();
  } finally {
    // Back to the prototype's methods.
    Reflect.deleteProperty(backend, "readSync");
    Reflect.deleteProperty(backend, "read");
  }
  return reads;
}

function argmax(row: Float32Array): number {
  let best = 0;
  for (let j = 1; j < row.length; j++) if (row[j]! > row[best]!) best = j;
  return best;
}

/** Prints whether Dawn (dawn.node) is mapped into the process after initBackend(<last argument>). */
const PROBE = `
import { readFileSync } from "node:fs";
import { initBackend } from "./shared/model/index.ts";
const info = await initBackend(process.argv.at(-1));
console.log(JSON.stringify({ name: info.name, dawn: readFileSync("/proc/self/maps", "utf8").includes("dawn.node") }));
process.exit(0);
`;

/**
 * Queues thousands of disposals (a model's worth of tensors) and exits at once. The device thread
 * must finish them first: terminating it while Dawn releases a buffer aborts the process (a fatal
 * napi_throw, seen as gpu-check's exit 134 on a loaded machine). A later exit listener reports
 * whether the bridge had drained and ended by then.
 */
const EXIT_WITH_QUEUED_DISPOSALS = `
import * as tf from "@tensorflow/tfjs";
import { initBackend } from "./shared/model/index.ts";
await initBackend("webgpu");
const kept = [];
for (let i = 0; i < 3000; i++) kept.push(tf.add(tf.fill([1 + (i % 64) * 97], i), 1));
kept.at(-1).dataSync();
for (const t of kept) t.dispose();
const bridge = tf.findBackend("webgpu");
process.on("exit", () => console.log(JSON.stringify({ drained: bridge.isDisposed })));
process.exit(0);
`;

describe.skipIf(!hasAdapter)("webgpu device thread lifetime", () => {
  it("exiting with disposals queued drains the device thread before it ends", async () => {
    const run = await runProcess(process.execPath, [
      "--import",
      "tsx",
      "--input-type=module",
      "-e",
      EXIT_WITH_QUEUED_DISPOSALS,
    ]);
    expect(run.stderr).not.toMatch(/FATAL|napi/);
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ drained: true });
  }, 120_000);
});

describe("backend choice", () => {
  it("the default wasm path never loads Dawn", async () => {
    const run = await runProcess(process.execPath, ["--import", "tsx", "--input-type=module", "-e", PROBE, "wasm"]);
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ name: "wasm", dawn: false });
  });

  it.skipIf(!hasAdapter)("webgpu loads Dawn only when named", async () => {
    const run = await runProcess(process.execPath, ["--import", "tsx", "--input-type=module", "-e", PROBE, "webgpu"]);
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ name: "webgpu", dawn: true });
  });

  it("an unknown backend is refused with the allowed names", async () => {
    await expect(initBackend("metal" as "cpu")).rejects.toThrow(
      /backend "metal" is not allowed \(allowed: auto, tensorflow, wasm, cpu, webgpu\)/,
    );
  });
});
