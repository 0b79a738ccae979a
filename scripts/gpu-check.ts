/**
 * scripts/gpu-check: is this machine ready to train on its GPU? `--backend tensorflow` (the
 * default) needs an NVIDIA GPU (`nvidia-smi -L`) and @tensorflow/tfjs-node-gpu (the trainer image
 * installs it); `--backend webgpu` needs a Vulkan driver Dawn accepts (a GPU's, or Mesa's lavapipe
 * on a CPU). Then it loads a model (a Hugging Face folder, or a random 4-layer model of
 * Qwen2.5-0.5B's width), compares log-probs and one training step with the cpu backend on the
 * same weights, runs a few train steps (forward, backward, gradient accumulation over 2
 * micro-batches, Adam) and a batched decode, and prints tokens/s, model GFLOP/s and the device
 * memory in use. Exit codes: 0 ready, 2 no GPU (or no WebGPU adapter), 3 no tfjs-node-gpu,
 * 4 numerics differ from cpu, 1 bad arguments or the check itself failed.
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
const USAGE =
  "usage: npm run gpu-check -- [<Hugging Face model folder>] [--backend tensorflow|webgpu] [--steps N] [--tokens N] " +
  "[--batch N] [--numerics-tokens N] [--logprob-tolerance X] [--relative-tolerance X] [--cpu-dry-run]";

export async function gpuCheck(args: readonly string[], io: GpuCheckIo): Promise<number> {
  if (args.includes("--help") || args.includes("-h")) {
    io.out(`${USAGE}\n`);
    return 0;
  }
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions(args);
  } catch (error) {
    io.err(`gpu-check: ${(error as Error).message.replace(/\. To specify a positional argument.*$/s, "")}\n${USAGE}\n`);
    return 1;
  }
  const { steps, sequenceTokens, batch, dryRun, hfDir, backendName, numericsTokens, tolerances } = parsed;
  let gpus = "none (--cpu-dry-run)";
  if (backendName === "webgpu") gpus = "WebGPU (Dawn)";
  else if (!dryRun) {
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
  const { forwardFlops, decodeFlops, trainFlops } = await import("../shared/model/flops.ts");
  const { compareWithCpu } = await import("./gpuCheckNumerics.ts");
  let backend: Awaited<ReturnType<typeof initBackend>>;
  try {
    backend = await initBackend(backendName === "webgpu" ? "webgpu" : dryRun ? "wasm" : "tensorflow");
  } catch (error) {
    io.err(`gpu-check: ${(error as Error).message.replace(/\. To specify a positional argument.*$/s, "")}\n${USAGE}\n`);
    return 2;
  }
  if (backendName === "tensorflow" && !dryRun && backend.source !== "@tensorflow/tfjs-node-gpu") {
    io.err(`gpu-check: the tensorflow backend came from ${backend.source}, not @tensorflow/tfjs-node-gpu\n`);
    return 3;
  }
  io.out(`gpu-check: ${gpus}\ngpu-check: backend ${tf.getBackend()} from ${backend.source}\n`);
  const adapter = backend.adapter;
  if (adapter) {
    const { limits } = adapter;
    io.out(
      `gpu-check: adapter ${adapter.vendor || "?"} / ${adapter.architecture || "?"} / "${adapter.description}" (fallback adapter: ${adapter.isFallbackAdapter ? "yes" : "no"})\n` +
        `gpu-check: limits ${ADAPTER_LIMITS.map((k) => `${k}=${limits[k] ?? "?"}`).join(" ")}\n`,
    );
    if (/llvmpipe|lavapipe|swiftshader/i.test(`${adapter.description} ${adapter.device} ${adapter.architecture}`))
      io.out(
        "gpu-check: this adapter is a CPU (Mesa lavapipe): a correctness path, its figures are not a GPU's speed\n",
      );
  }

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
  const values = folder?.values ?? initialValues(config, 1);
  // Numerics first, on fresh copies of the weights (disposed before the timed policy is built).
  const numericsSequences = [numericsTokens, Math.max(2, Math.ceil(numericsTokens / 2))].map((length, k) =>
    Int32Array.from({ length }, (_, i) => (i * 7919 + k * 104_729 + 13) % Math.min(config.vocabSize, 150_000)),
  );
  const numerics = await compareWithCpu(config, values, numericsSequences, tolerances);
  io.out(
    `gpu-check: numerics vs cpu (${numericsSequences.map((q) => q.length).join(" + ")} tokens): ` +
      `log-prob max |diff| ${numerics.logProbMaxAbs.toExponential(2)} (allowed ${tolerances.logProb}), ` +
      `loss rel ${numerics.lossRel.toExponential(2)}, grad norm rel ${numerics.gradNormRel.toExponential(2)} (allowed ${tolerances.relative}): ` +
      `${numerics.ok ? "ok" : "MISMATCH"}\n`,
  );
  if (!numerics.ok) {
    io.err("gpu-check: numerics on this backend do not match the cpu backend's\n");
    return 4;
  }
  const policy = new TransformerPolicy(config, values, 0, {
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
    const stepFlops = trainFlops(
      config,
      sequences.map((q) => q.length),
    );
    for (let step = 0; step <= steps; step++) {
      const started = performance.now();
      const result = policy.trainStep(sequences, 1, loss);
      const seconds = (performance.now() - started) / 1000;
      // Step 0 compiles kernels; it is reported but not a throughput figure.
      io.out(
        `gpu-check: train step ${step}${step === 0 ? " (warm-up)" : ""}: ${seconds.toFixed(2)} s, ${(tokens / seconds).toFixed(0)} tokens/s, loss ${result.loss.toFixed(4)}, ${(stepFlops / seconds / 1e9).toFixed(3)} GFLOP/s\n`,
      );
    }
    const decoder = policy.createDecoder(batch);
    const promptTokens = Math.min(64, sequenceTokens);
    // Greedy, drawn the way the policy server draws (on the device for device backends).
    const greedy = { temperature: 0, topP: 1, uniform: 0 };
    const slots: number[] = [];
    let next: number[] = [];
    for (const sequence of sequences) {
      const { slot, drawn } = decoder.addAndDraw(Array.from(sequence.subarray(0, promptTokens)), greedy);
      slots.push(slot);
      next.push(drawn.token);
    }
    const decodeSteps = Math.min(64, config.contextLength - promptTokens - 1);
    const decodeStarted = performance.now();
    const draws = slots.map(() => greedy);
    for (let t = 0; t < decodeSteps; t++) next = decoder.stepAndDraw(slots, next, draws).map((d) => d.token);
    const decodeSeconds = (performance.now() - decodeStarted) / 1000;
    decoder.dispose();
    let decodeWork = 0;
    for (let t = 0; t < decodeSteps; t++) decodeWork += batch * decodeFlops(config, promptTokens + t);
    const prefillWork = forwardFlops(
      config,
      sequences.map(() => promptTokens),
    );
    io.out(
      `gpu-check: prefill ${batch} × ${promptTokens} tokens: ${(prefillWork / 1e9).toFixed(3)} GFLOP (not timed)\n` +
        `gpu-check: decode ${batch} × ${decodeSteps} tokens: ${((batch * decodeSteps) / decodeSeconds).toFixed(0)} tokens/s, ${(decodeWork / decodeSeconds / 1e9).toFixed(3)} GFLOP/s\n` +
        `gpu-check: device memory in use ${formatBytes(tf.memory().numBytes)}\n` +
        (dryRun ? "gpu-check: dry run on the CPU done (no GPU figures)\n" : "gpu-check: ready\n"),
    );
    return 0;
  } finally {
    policy.dispose();
  }
}

/** Adapter limits worth seeing before sizing a model: the largest buffer, binding and workgroup. */
const ADAPTER_LIMITS = [
  "maxBufferSize",
  "maxStorageBufferBindingSize",
  "maxStorageBuffersPerShaderStage",
  "maxComputeWorkgroupStorageSize",
  "maxComputeInvocationsPerWorkgroup",
] as const;

const BACKENDS = ["tensorflow", "webgpu"] as const;

function parseOptions(args: readonly string[]) {
  const { values, positionals } = parseArgs({
    args: [...args],
    allowPositionals: true,
    options: {
      backend: { type: "string", default: "tensorflow" },
      steps: { type: "string", default: "3" },
      tokens: { type: "string", default: "512" },
      batch: { type: "string", default: "8" },
      "numerics-tokens": { type: "string", default: "12" },
      "logprob-tolerance": { type: "string", default: "2e-3" },
      "relative-tolerance": { type: "string", default: "1e-3" },
      "cpu-dry-run": { type: "boolean", default: false },
    },
  });
  const backendName = BACKENDS.find((b) => b === values.backend);
  if (!backendName) throw new Error(`--backend must be one of ${BACKENDS.join(", ")}, got "${values.backend}"`);
  if (backendName === "webgpu" && values["cpu-dry-run"])
    throw new Error(
      "--cpu-dry-run is for --backend tensorflow; --backend webgpu runs on a CPU through lavapipe as it is",
    );
  const tolerance = (name: string, text: string) => {
    const value = Number(text);
    if (!Number.isFinite(value) || value < 0) throw new Error(`--${name} must be a number >= 0, got "${text}"`);
    return value;
  };
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
    backendName,
    numericsTokens: Math.max(2, number("numerics-tokens", values["numerics-tokens"])),
    tolerances: {
      logProb: tolerance("logprob-tolerance", values["logprob-tolerance"]),
      relative: tolerance("relative-tolerance", values["relative-tolerance"]),
    },
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href)
  process.exit(
    await gpuCheck(process.argv.slice(2), {
      out: (text) => process.stdout.write(text),
      err: (text) => process.stderr.write(text),
    }),
  );
