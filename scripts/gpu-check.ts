/**
 * scripts/gpu-check: is this machine ready to train on its GPU? Needs an NVIDIA GPU
 * (`nvidia-smi -L`) and @tensorflow/tfjs-node-gpu (the trainer image installs it). Then it loads
 * a model (a Hugging Face folder, or a random 4-layer model of Qwen2.5-0.5B's width), runs a few
 * train steps (forward, backward, gradient accumulation over 2 micro-batches, Adam) and a batched
 * decode, and prints tokens/s and the device memory in use. Exit codes: 0 ready, 2 no GPU,
 * 3 no tfjs-node-gpu, 1 bad arguments or the check itself failed.
 */
import { spawnSync } from "node:child_process";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";

/** Where the check writes (stdout and stderr for the script; buffers in tests). */
export interface GpuCheckIo {
  readonly out: (text: string) => void;
  readonly err: (text: string) => void;
}

/** What is missing for GPU training: the prerequisites are checked before TF.js is loaded, so this answers fast. */
function missingPrerequisites(): { missing: string[]; gpus: string } {
  const missing: string[] = [];
  const smi = spawnSync("nvidia-smi", ["-L"], { encoding: "utf8" });
  const gpus = smi.status === 0 ? smi.stdout.trim() : "";
  if (!gpus)
    missing.push(
      `no NVIDIA GPU: \`nvidia-smi -L\` ${smi.error ? `could not run (${smi.error.message})` : `exited ${smi.status}`}`,
    );
  try {
    createRequire(import.meta.url).resolve("@tensorflow/tfjs-node-gpu");
  } catch {
    missing.push("@tensorflow/tfjs-node-gpu is not installed (the trainer image installs it)");
  }
  return { missing, gpus };
}

/**
 * Runs the check with command-line `args`; returns the exit code.
 * `--cpu-dry-run` runs the same steps on the wasm backend without a GPU: it tests the script, and
 * its figures say nothing about a GPU.
 */
export async function gpuCheck(args: readonly string[], io: GpuCheckIo): Promise<number> {
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions(args);
  } catch (error) {
    io.err(`gpu-check: ${(error as Error).message}\n`);
    return 1;
  }
  const { steps, sequenceTokens, batch, dryRun, hfDir } = parsed;
  let gpus = "none (--cpu-dry-run)";
  if (!dryRun) {
    const found = missingPrerequisites();
    if (found.missing.length > 0) {
      io.err(
        `gpu-check: this machine cannot train on a GPU:\n${found.missing.map((m) => `  - ${m}`).join("\n")}\n` +
          "Run it in the trainer image on a GPU host, with @tensorflow/tfjs-node-gpu and the CUDA/cuDNN versions it names.\n",
      );
      return found.gpus ? 3 : 2;
    }
    gpus = found.gpus;
  }
  const tf = await import("@tensorflow/tfjs");
  const { initBackend } = await import("../shared/model/backend.ts");
  const { ModelConfig } = await import("../shared/config/policy.ts");
  const { readHfFolder } = await import("../shared/model/hf/index.ts");
  const { estimateTrainingMemory, formatBytes } = await import("../shared/model/memory.ts");
  const { initialValues, TransformerPolicy } = await import("../shared/model/transformer.ts");
  const backend = await initBackend(dryRun ? "wasm" : "tensorflow");
  if (!dryRun && backend.source !== "@tensorflow/tfjs-node-gpu") {
    io.err(`gpu-check: the tensorflow backend came from ${backend.source}, not @tensorflow/tfjs-node-gpu\n`);
    return 3;
  }
  io.out(`gpu-check: ${gpus}\ngpu-check: backend ${tf.getBackend()} from ${backend.source}\n`);

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
  try {
    const estimate = estimateTrainingMemory(config, { microBatchTokens, sequenceTokens });
    io.out(
      `gpu-check: model ${hfDir ?? "random, Qwen2.5-0.5B width, 4 layers"}: ${(estimate.parameters / 1e6).toFixed(2)}M parameters; estimated step memory ${formatBytes(estimate.bytes.total)}\n`,
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
    const loss = (logp: import("@tensorflow/tfjs").Tensor2D) =>
      tf.div(tf.neg(tf.sum(logp)), tokens) as import("@tensorflow/tfjs").Scalar;
    for (let step = 0; step <= steps; step++) {
      const started = performance.now();
      const result = policy.trainStep(sequences, 1, loss);
      const seconds = (performance.now() - started) / 1000;
      // Step 0 compiles kernels; it is reported but not a throughput figure.
      io.out(
        `gpu-check: train step ${step}${step === 0 ? " (warm-up)" : ""}: ${seconds.toFixed(2)} s, ${(tokens / seconds).toFixed(0)} tokens/s, loss ${result.loss.toFixed(4)}\n`,
      );
    }
    const decoder = policy.createDecoder(batch);
    const promptTokens = Math.min(64, sequenceTokens);
    const argmax = (logits: Float32Array) => logits.reduce((best, v, i, all) => (v > all[best]! ? i : best), 0);
    const slots: number[] = [];
    let next: number[] = [];
    for (const sequence of sequences) {
      const { slot, logits } = decoder.add(Array.from(sequence.subarray(0, promptTokens)));
      slots.push(slot);
      next.push(argmax(logits));
    }
    const decodeSteps = Math.min(64, config.contextLength - promptTokens - 1);
    const decodeStarted = performance.now();
    for (let t = 0; t < decodeSteps; t++) next = decoder.step(slots, next).map(argmax);
    const decodeSeconds = (performance.now() - decodeStarted) / 1000;
    decoder.dispose();
    io.out(
      `gpu-check: decode ${batch} × ${decodeSteps} tokens: ${((batch * decodeSteps) / decodeSeconds).toFixed(0)} tokens/s\n` +
        `gpu-check: device memory in use ${formatBytes(tf.memory().numBytes)}\n` +
        (dryRun ? "gpu-check: dry run on the CPU done (no GPU figures)\n" : "gpu-check: ready\n"),
    );
    return 0;
  } finally {
    policy.dispose();
  }
}

function parseOptions(args: readonly string[]) {
  const { values, positionals } = parseArgs({
    args: [...args],
    allowPositionals: true,
    options: {
      steps: { type: "string", default: "3" },
      tokens: { type: "string", default: "512" },
      batch: { type: "string", default: "8" },
      "cpu-dry-run": { type: "boolean", default: false },
    },
  });
  const number = (name: string, text: string) => {
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be an integer >= 1, got "${text}"`);
    return value;
  };
  if (positionals.length > 1) throw new Error(`at most one Hugging Face folder, got ${positionals.length} arguments`);
  return {
    steps: number("steps", values.steps),
    sequenceTokens: number("tokens", values.tokens),
    batch: number("batch", values.batch),
    dryRun: values["cpu-dry-run"] === true,
    hfDir: positionals[0],
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href)
  process.exit(
    await gpuCheck(process.argv.slice(2), {
      out: (text) => process.stdout.write(text),
      err: (text) => process.stderr.write(text),
    }),
  );
