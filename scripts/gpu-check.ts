/**
 * scripts/gpu-check: is this machine ready to train on its GPU? Needs an NVIDIA GPU
 * (`nvidia-smi -L`) and @tensorflow/tfjs-node-gpu (the trainer image installs it). Then it loads
 * a model (a Hugging Face folder, or a random 4-layer model of Qwen2.5-0.5B's width), runs a few
 * train steps (forward, backward, gradient accumulation over 2 micro-batches, Adam) and a batched
 * decode, and prints tokens/s and the device memory in use. Exit codes: 0 ready, 2 no GPU,
 * 3 no tfjs-node-gpu, 1 the check itself failed.
 */
import { spawnSync } from "node:child_process";
import { parseArgs } from "node:util";
import * as tf from "@tensorflow/tfjs";
import { ModelConfig } from "../shared/config/policy.ts";
import { initBackend } from "../shared/model/backend.ts";
import { readHfFolder } from "../shared/model/hf/index.ts";
import { estimateTrainingMemory, formatBytes } from "../shared/model/memory.ts";
import { initialValues, TransformerPolicy } from "../shared/model/transformer.ts";

const { values: flags, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    steps: { type: "string", default: "3" },
    tokens: { type: "string", default: "512" },
    batch: { type: "string", default: "8" },
    /** Runs the same steps on the wasm backend without a GPU (tests the script; its figures say nothing about a GPU). */
    "cpu-dry-run": { type: "boolean", default: false },
  },
});
const dryRun = flags["cpu-dry-run"] === true;
const steps = Number(flags.steps);
const sequenceTokens = Number(flags.tokens);
const batch = Number(flags.batch);
for (const [name, value] of [
  ["--steps", steps],
  ["--tokens", sequenceTokens],
  ["--batch", batch],
] as const)
  if (!Number.isInteger(value) || value < 1) {
    process.stderr.write(`gpu-check: ${name} must be an integer >= 1, got "${value}"\n`);
    process.exit(1);
  }

const missing: string[] = [];
const smi = dryRun ? undefined : spawnSync("nvidia-smi", ["-L"], { encoding: "utf8" });
const gpus = dryRun ? "none (--cpu-dry-run)" : smi?.status === 0 ? smi.stdout.trim() : "";
if (!gpus)
  missing.push(
    `no NVIDIA GPU: \`nvidia-smi -L\` ${smi?.error ? `could not run (${smi.error.message})` : `exited ${smi?.status}`}`,
  );
let backendSource = "";
try {
  backendSource = (await initBackend(dryRun ? "wasm" : "tensorflow")).source;
} catch (error) {
  missing.push(`no TensorFlow backend: ${(error as Error).message.split("\n")[0]}`);
}
if (!dryRun && backendSource && backendSource !== "@tensorflow/tfjs-node-gpu")
  missing.push(`@tensorflow/tfjs-node-gpu is not installed (found ${backendSource}, which runs on the CPU)`);
if (missing.length > 0) {
  process.stderr.write(
    `gpu-check: this machine cannot train on a GPU:\n${missing.map((m) => `  - ${m}`).join("\n")}\n` +
      "Run it in the trainer image on a GPU host, with @tensorflow/tfjs-node-gpu and the CUDA/cuDNN versions it names.\n",
  );
  process.exit(gpus ? 3 : 2);
}
process.stdout.write(`gpu-check: ${gpus}\ngpu-check: backend ${tf.getBackend()} from ${backendSource}\n`);

const hfDir = positionals[0];
const folder = hfDir ? await readHfFolder(hfDir) : undefined;
const config =
  folder?.config ??
  ModelConfig.parse({
    vocabSize: 151936,
    dModel: 896,
    layers: 4,
    heads: 14,
    kvHeads: 2,
    ffnHidden: 4864,
    contextLength: 4096,
    ropeTheta: 1_000_000,
    normEps: 1e-6,
    tieEmbeddings: true,
    qkvBias: true,
  });
const microBatchTokens = Math.ceil((batch * sequenceTokens) / 2);
const policy = new TransformerPolicy(config, folder?.values ?? initialValues(config, 1), 0, {
  trainable: true,
  optimizer: { microBatchTokens, learningRate: 1e-6 },
});
const estimate = estimateTrainingMemory(config, { microBatchTokens, sequenceTokens });
process.stdout.write(
  `gpu-check: model ${hfDir ?? "random, Qwen2.5-0.5B width, 4 layers"}: ${(estimate.parameters / 1e6).toFixed(1)}M parameters; estimated step memory ${formatBytes(estimate.bytes.total)}\n`,
);

let seed = 7;
const random = () => {
  seed = (seed * 1103515245 + 12345) >>> 0;
  return seed / 2 ** 32;
};
const sequences = Array.from({ length: batch }, () =>
  Int32Array.from({ length: sequenceTokens }, () => Math.floor(random() * Math.min(config.vocabSize, 150_000))),
);
const tokens = batch * sequenceTokens;
const loss = (logp: tf.Tensor2D) => tf.div(tf.neg(tf.sum(logp)), tokens) as tf.Scalar;
for (let step = 0; step <= steps; step++) {
  const started = performance.now();
  const result = policy.trainStep(sequences, 1, loss);
  const seconds = (performance.now() - started) / 1000;
  // Step 0 compiles kernels; it is reported but not a throughput figure.
  process.stdout.write(
    `gpu-check: train step ${step}${step === 0 ? " (warm-up)" : ""}: ${seconds.toFixed(2)} s, ${(tokens / seconds).toFixed(0)} tokens/s, loss ${result.loss.toFixed(4)}\n`,
  );
}

const decoder = policy.createDecoder(batch);
const slots: number[] = [];
let next: number[] = [];
const argmax = (logits: Float32Array) => logits.reduce((best, v, i, all) => (v > all[best]! ? i : best), 0);
for (let b = 0; b < batch; b++) {
  const { slot, logits } = decoder.add(Array.from(sequences[b]!.subarray(0, Math.min(64, sequenceTokens))));
  slots.push(slot);
  next.push(argmax(logits));
}
const decodeSteps = Math.min(64, config.contextLength - Math.min(64, sequenceTokens) - 1);
const decodeStarted = performance.now();
for (let t = 0; t < decodeSteps; t++) next = decoder.step(slots, next).map(argmax);
const decodeSeconds = (performance.now() - decodeStarted) / 1000;
process.stdout.write(
  `gpu-check: decode ${batch} × ${decodeSteps} tokens: ${((batch * decodeSteps) / decodeSeconds).toFixed(0)} tokens/s\n` +
    `gpu-check: device memory in use ${formatBytes(tf.memory().numBytes)}\n` +
    (dryRun ? "gpu-check: dry run on the CPU done (no GPU figures)\n" : "gpu-check: ready\n"),
);
decoder.dispose();
policy.dispose();
