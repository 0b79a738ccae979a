/**
 * `npm run bench:train` — data-parallel training (shared/model/dataParallel.ts) against one
 * thread: the default model (ModelConfig.parse({})), batches of 8 × 256 tokens (bench:policy's
 * training row), one Adam step each, with 1 and with 2 threads side by side. The two runs start
 * from the same weights and take the same batches; their steps alternate (1 thread, 2 threads,
 * 1, 2, …) so a load that comes and goes on a shared machine falls on both alike. Prints
 * tokens/s wall and per CPU second (the CPU time is the whole process, both threads), the
 * speed-up, and how far the two runs' weights drifted apart (float rounding only).
 *
 * The last line is one JSON object (bench/summary.ts TrainSummary): trainTokPerS1Thread,
 * trainTokPerS2Threads (wall clock), dataParallelSpeedup, loadAverage.
 *
 * Options: --steps N timed steps per side (default 10), --warmup N untimed steps first (default 2),
 * --backend auto|tensorflow|wasm|cpu|webgpu (else the environment's AGENTRL_BACKEND), --model
 * default|small. On webgpu only the one-thread side runs (replicas would each need the device; the
 * two-thread figures read null); on lavapipe its figures are a correctness path, not a GPU's speed.
 */
import { loadavg } from "node:os";
import { readScriptArgs } from "../shared/commandLine.ts";
import { DataParallelTrainer } from "../shared/model/dataParallel.ts";
import { DATA_PARALLEL_NODE_FLAGS, missingNodeFlags } from "../shared/model/dataParallelFlags.ts";
import { createPolicy, initBackend } from "../shared/model/index.ts";
import nllShardLoss, { type NllInput } from "../trainer-image/sft/nllShard.ts";
import { intFlag } from "./flags.ts";
import { backendFlag, modelFlag } from "./modelFlags.ts";
import { figure, printSummary, TrainSummary } from "./summary.ts";

const SCRIPT = {
  command: "npm run bench:train --",
  usage: "[--steps N] [--warmup N] [--backend auto|wasm|cpu|tensorflow|webgpu] [--model default|small]",
};
const { values: flags } = readScriptArgs(SCRIPT, {
  options: {
    steps: { type: "string", default: "10" },
    warmup: { type: "string", default: "2" },
    backend: { type: "string" },
    model: { type: "string", default: "default" },
  },
});
const STEPS = intFlag("steps", flags.steps, 1);
const WARMUP = intFlag("warmup", flags.warmup, 0);
const preference = backendFlag(flags.backend);
const config = modelFlag(flags.model);

const ROWS = 8;
const LENGTH = Math.min(256, config.contextLength);
const info = await initBackend(preference);
/** Thread counts compared: data parallelism needs a backend every replica thread can start. */
const THREADS = info.name === "webgpu" ? [1] : [1, 2];
const loadAtStart = loadavg()[0] as number;
console.log(`backend ${info.name} (${info.source}); load average ${loadAtStart.toFixed(2)}`);
const missingFlags = missingNodeFlags();
console.log(
  missingFlags.length === 0
    ? `node flags: ${DATA_PARALLEL_NODE_FLAGS.join(" ")} (as the launcher gives a data-parallel trainer)`
    : `node flags missing: ${missingFlags.join(" ")} (npm run bench:train passes them; without them two threads are slower)`,
);
console.log(
  `model d=${config.dModel} layers=${config.layers} heads=${config.heads}/${config.kvHeads} ffn=${config.ffnHidden} vocab=${config.vocabSize}; ${ROWS} x ${LENGTH} tokens per step`,
);

const tokensOf = (n: number, salt: number) =>
  Int32Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104_729 + 13) % config.vocabSize);
/** A different batch every step; mean NLL over every predicted token. */
const batchOf = (step: number) => Array.from({ length: ROWS }, (_, i) => tokensOf(LENGTH, 100 + step * ROWS + i));
const weights = Array.from({ length: ROWS }, () => Float32Array.from({ length: LENGTH }, (_, t) => (t === 0 ? 0 : 1)));
const input: NllInput = { weights, totalWeight: ROWS * (LENGTH - 1) };

const sides = await Promise.all(
  THREADS.map(async (threads) => {
    const policy = createPolicy(config, 1, { optimizer: { learningRate: 1e-3 } });
    return { threads, policy, trainer: await DataParallelTrainer.start(policy, { threads, loss: nllShardLoss }) };
  }),
);
const timed = new Map(sides.map((s) => [s.threads, { wallMs: 0, cpuUs: 0, losses: [] as number[] }]));
/** The two-thread steps' time split (see ParallelStepResult.timings), summed over the timed steps. */
const split = { shardMs: 0, replicaShardMs: 0, waitMs: 0, applyMs: 0 };
for (let step = 0; step < WARMUP + STEPS; step++) {
  for (const side of sides) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    const { loss, timings } = await side.trainer.trainStep(batchOf(step), 1, input);
    const wallMs = performance.now() - t0;
    const cpu = process.cpuUsage(c0);
    if (step < WARMUP) continue;
    const total = timed.get(side.threads)!;
    total.wallMs += wallMs;
    total.cpuUs += cpu.user + cpu.system;
    total.losses.push(loss);
    if (timings) for (const key of Object.keys(split) as Array<keyof typeof split>) split[key] += timings[key];
  }
}
const tokens = STEPS * ROWS * LENGTH;
const rate = (threads: number) => {
  const t = timed.get(threads);
  if (!t) return undefined;
  return { wall: tokens / (t.wallMs / 1000), cpu: tokens / (t.cpuUs / 1e6), stepMs: t.wallMs / STEPS };
};
const one = rate(1)!;
const two = rate(2);
const [a, b] = sides.map((s) => s.policy.values());
let drift = 0;
if (b)
  for (const [name, x] of a!) {
    const y = b.get(name)!;
    for (let i = 0; i < x.length; i++) drift = Math.max(drift, Math.abs(x[i]! - y[i]!));
  }
const twoLosses = timed.get(2)?.losses;
const lossGap = twoLosses ? Math.max(...timed.get(1)!.losses.map((l, i) => Math.abs(l - twoLosses[i]!))) : 0;
for (const side of sides) {
  await side.trainer.close();
  side.policy.dispose();
}

const fmt = (x: number, digits = 0) => x.toFixed(digits).padStart(9);
console.log(
  `\n${STEPS} timed steps each (after ${WARMUP} untimed), alternating   tokens/s wall  tokens/s cpu  ms/step`,
);
console.log(
  `  1 thread                                          ${fmt(one.wall)}     ${fmt(one.cpu)} ${fmt(one.stepMs)}`,
);
if (two) {
  console.log(
    `  2 threads (data parallel)                         ${fmt(two.wall)}     ${fmt(two.cpu)} ${fmt(two.stepMs)}`,
  );
  console.log(
    `  2 threads, per step: this thread's shard ${(split.shardMs / STEPS).toFixed(0)} ms, the replica's ${(split.replicaShardMs / STEPS).toFixed(0)} ms, waiting for it ${(split.waitMs / STEPS).toFixed(0)} ms, summed Adam step ${(split.applyMs / STEPS).toFixed(0)} ms`,
  );
  console.log(`  speed-up (wall)                                   ${fmt(two.wall / one.wall, 2)}x`);
  console.log(
    `  largest |weight difference| after the run: ${drift.toExponential(2)}; largest |loss difference|: ${lossGap.toExponential(2)}`,
  );
} else console.log(`  2 threads: not measured on ${info.name} (data-parallel replicas cannot share its device)`);
const loadAtEnd = loadavg()[0] as number;
console.log(`load average ${loadAtStart.toFixed(2)} at the start, ${loadAtEnd.toFixed(2)} at the end`);
printSummary(TrainSummary, {
  trainTokPerS1Thread: figure(one.wall),
  trainTokPerS2Threads: figure(two?.wall),
  dataParallelSpeedup: figure(two && two.wall / one.wall),
  loadAverage: figure(loadAtEnd) ?? 0,
});
