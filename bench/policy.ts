/**
 * `npm run bench:policy` — throughput of the TF.js policy on this machine, in one run:
 * decode tokens/s at 1, 8 and 64 concurrent sequences with continuous batching (one batched step
 * for all) against one-at-a-time (each sequence stepped alone), training tokens/s (Adam step over
 * 8 × 256 tokens), and achieved GFLOP/s as a fraction of the backend's own 512² matMul GFLOP/s.
 * Both wall-clock and process-CPU rates are printed: on a shared machine CPU time is the fairer one.
 *
 * Decode: each side decodes the same positions (a fresh decoder per cycle, prompt 64 prefilled
 * untimed, then 32 tokens per sequence timed); rounds of the two sides alternate until each has
 * BENCH_SECONDS of CPU and ≥ 5 rounds, and the rates are medians over rounds (the per-round
 * speed-ups are printed as a range). Besides process CPU, the decoding thread's own CPU time is
 * reported (/proc/thread-self/schedstat): process CPU also counts V8's GC helper threads.
 *
 * The last line is one JSON object of the headline figures (CPU-time rates), under stable keys:
 * decodeSpeedup64 (64 concurrent batched over one at a time), decodeTokPerS64 (batched, 64
 * concurrent), decodeTokPerS1 (one at a time, 64 sequences), the same three per thread-CPU second
 * (decodeSpeedup64Thread, decodeTokPerS64Thread, decodeTokPerS1Thread), trainTokPerS,
 * trainMatmulFraction (training GFLOP/s over the backend's 512² matMul GFLOP/s), matmulGflops, loadAverage.
 *
 * Then the same through the policy server's scheduler, end to end (prefill of the 64-token prompt
 * included, 32 tokens per sequence): decode in a worker thread (the server's default) against in
 * this thread, at 64 concurrent and 1 at a time, with the longest the HTTP thread's event loop
 * went without turning (how long a request could wait to be answered). CPU time is the whole process (both threads).
 * JSON keys: workerTokPerS64, inThreadTokPerS64, workerTokPerS1, inThreadTokPerS1 (CPU time),
 * workerLoopGapMs64, inThreadLoopGapMs64 (HTTP thread blocked at most, 64 concurrent).
 *
 * Options: --backend auto|tensorflow|wasm|cpu|webgpu (else the environment's AGENTRL_BACKEND),
 * --model default|small, --widths 1,8,64 (decode concurrencies); environment BENCH_SECONDS (per
 * measurement and, for decode, per side and width; default 1.5). On webgpu the scheduler's worker
 * rows are not measured (a device backend decodes on the HTTP thread) and read null in the summary;
 * on lavapipe (webgpu on a CPU) the figures are a correctness path, not a GPU's speed.
 */
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import * as tf from "@tensorflow/tfjs";
import { readScriptArgs } from "../shared/commandLine.ts";
import { createPolicy, initBackend } from "../shared/model/index.ts";
import { BatchScheduler, type Generator } from "../trainer-image/policy-server/scheduler.ts";
import { ThreadedScheduler } from "../trainer-image/policy-server/threaded.ts";
import { intFlag } from "./flags.ts";
import { backendFlag, modelFlag } from "./modelFlags.ts";
import { figure, PolicySummary, printSummary } from "./summary.ts";

const SCRIPT = {
  command: "npm run bench:policy --",
  usage: "[--backend auto|wasm|cpu|tensorflow|webgpu] [--model default|small] [--widths 1,8,64]",
};
const { values: flags } = readScriptArgs(SCRIPT, {
  options: {
    backend: { type: "string" },
    model: { type: "string", default: "default" },
    widths: { type: "string", default: "1,8,64" },
  },
});
const preference = backendFlag(flags.backend);
const config = modelFlag(flags.model);
const widths = flags.widths.split(",").map((w) => intFlag("widths", w, 1, 512));
const seconds = Number(process.env.BENCH_SECONDS ?? 1.5);

interface Rate {
  wall: number;
  cpu: number;
}

/**
 * Runs `step` (each call producing `unitsPerCall` units) until `seconds` pass and at least
 * `minCalls` calls ran, or `maxCalls` calls; returns units/s.
 */
function rate(unitsPerCall: number, step: () => void, maxCalls = Number.POSITIVE_INFINITY, minCalls = 1): Rate {
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  let calls = 0;
  while (calls < maxCalls && (calls < minCalls || performance.now() - t0 < seconds * 1000)) {
    step();
    calls += 1;
  }
  const c = process.cpuUsage(c0);
  return {
    wall: (unitsPerCall * calls) / ((performance.now() - t0) / 1000),
    cpu: (unitsPerCall * calls) / ((c.user + c.system) / 1e6),
  };
}

const fmt = (x: number, digits = 0) => x.toFixed(digits).padStart(8);

const median = (xs: number[]) => {
  const sorted = [...xs].sort((p, q) => p - q);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

const info = await initBackend(preference);
const started = performance.now();
console.log(`backend ${info.name} (${info.source}); load average ${loadavg()[0]!.toFixed(1)}`);
console.log(
  `model d=${config.dModel} layers=${config.layers} heads=${config.heads}/${config.kvHeads} ffn=${config.ffnHidden} vocab=${config.vocabSize}`,
);

// The backend's own matMul rate: the ceiling the model's FLOP/s are compared against. Rounds of
// 20 calls before and after training, median of all: a single measurement at the start spread
// 23..36 GFLOP/s over three runs under load and carried that into trainMatmulFraction.
const a = tf.randomNormal([512, 512]);
const b = tf.randomNormal([512, 512]);
for (let i = 0; i < 3; i++) tf.tidy(() => tf.matMul(a, b).dataSync());
const matmulRounds: Rate[] = [];
function measureMatmul(rounds: number): { wall: number; cpu: number } {
  for (let r = 0; r < rounds; r++)
    matmulRounds.push(
      rate(
        2 * 512 ** 3,
        () => {
          const c = tf.matMul(a, b);
          c.dataSync();
          c.dispose();
        },
        20,
        20,
      ),
    );
  return {
    wall: median(matmulRounds.map((m) => m.wall)) / 1e9,
    cpu: median(matmulRounds.map((m) => m.cpu)) / 1e9,
  };
}
let matmulGflops = measureMatmul(3);
console.log(
  `matMul 512x512: ${matmulGflops.wall.toFixed(1)} GFLOP/s wall, ${matmulGflops.cpu.toFixed(1)} GFLOP/s cpu\n`,
);

const policy = createPolicy(config, 1);
const d = config.dModel;
const hd = d / config.heads;
// Weights touched per token outside the embedding lookup: blocks + LM head.
const denseParams =
  config.layers * (d * (config.heads + 2 * config.kvHeads) * hd + config.heads * hd * d + 3 * d * config.ffnHidden) +
  d * config.vocabSize;
const tokensOf = (n: number, salt: number) =>
  Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104_729 + 13) % config.vocabSize);

const promptLength = 64;
/** Tokens each sequence decodes in a measurement cycle (positions 64..95), the same on both sides. */
const decodeSteps = 32;

/**
 * CPU seconds of this thread alone (Linux: /proc/thread-self/schedstat, nanoseconds), or undefined
 * elsewhere. Process CPU also counts V8's GC helper threads, which run beside the main thread and
 * made process CPU exceed wall time; the decode loop itself is this thread.
 */
function threadCpuSeconds(): number | undefined {
  try {
    return Number(readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[0]) / 1e9;
  } catch {
    return undefined;
  }
}

/** Accumulated time of the timed parts of a measurement. */
class Clock {
  wall = 0;
  cpu = 0;
  thread = 0;
  /** Runs `fn`, adding its wall, process-CPU and thread-CPU seconds. */
  time(fn: () => void): void {
    const c0 = process.cpuUsage();
    const th0 = threadCpuSeconds();
    const t0 = performance.now();
    fn();
    this.wall += (performance.now() - t0) / 1000;
    const th1 = threadCpuSeconds();
    this.thread += th0 === undefined || th1 === undefined ? Number.NaN : th1 - th0;
    const c = process.cpuUsage(c0);
    this.cpu += (c.user + c.system) / 1e6;
  }
}

interface DecodeRate extends Rate {
  /** Tokens per second of this thread's CPU time. */
  thread: number;
}

/**
 * One measurement cycle: a fresh decoder with `n` sequences of the 64-token prompt (prefill not
 * timed), then `decodeSteps` tokens for each, timed: batched (all n advance in one step) or one at
 * a time (each sequence stepped alone, round robin, so both sides decode the same positions).
 */
let cycleSalt = 0;
function decodeCycle(n: number, batched: boolean, clock: Clock): number {
  cycleSalt += n; // fresh prompts each cycle
  const salt = cycleSalt;
  const decoder = policy.createDecoder(n);
  const slots = Array.from({ length: n }, (_, i) => decoder.add(tokensOf(promptLength, salt + i)).slot);
  const tokens = slots.map((_, i) => (i * 31 + salt) % config.vocabSize);
  clock.time(() => {
    for (let s = 0; s < decodeSteps; s++) {
      if (batched) decoder.step(slots, tokens);
      else for (let i = 0; i < n; i++) decoder.step([slots[i]!], [tokens[i]!]);
    }
  });
  decoder.dispose();
  return n * decodeSteps;
}

/**
 * Batched and one-at-a-time rates at `n` concurrent: rounds of each side alternate (so load that
 * comes and goes hits both alike) until each side has `seconds` of CPU time and at least 5
 * rounds; a round is whole cycles adding up to ≥ 0.2 s. Rates are the median over rounds.
 */
function decodeRates(n: number): { batched: DecodeRate; single: DecodeRate; rounds: number; speedups: number[] } {
  const roundSeconds = Math.min(0.2, seconds / 5);
  const sides = [true, false].map(() => ({ cpu: 0, rounds: [] as DecodeRate[] }));
  // Warm-up: a round of each side, so V8 has optimised this width's loops before timing.
  for (const batched of [true, false]) {
    const clock = new Clock();
    while (clock.cpu < roundSeconds) decodeCycle(n, batched, clock);
  }
  while (sides.some((side) => side.cpu < seconds || side.rounds.length < 5)) {
    [true, false].forEach((batched, k) => {
      const clock = new Clock();
      let tokens = 0;
      while (clock.cpu < roundSeconds) tokens += decodeCycle(n, batched, clock);
      sides[k]!.cpu += clock.cpu;
      sides[k]!.rounds.push({ wall: tokens / clock.wall, cpu: tokens / clock.cpu, thread: tokens / clock.thread });
    });
  }
  const summarise = (rounds: DecodeRate[]): DecodeRate => ({
    wall: median(rounds.map((r) => r.wall)),
    cpu: median(rounds.map((r) => r.cpu)),
    thread: median(rounds.map((r) => r.thread)),
  });
  const [batchedRounds, singleRounds] = [sides[0]!.rounds, sides[1]!.rounds];
  return {
    batched: summarise(batchedRounds),
    single: summarise(singleRounds),
    rounds: batchedRounds.length,
    speedups: batchedRounds.map((r, i) => r.cpu / singleRounds[i]!.cpu),
  };
}

console.log(
  `decode tokens/s (prompt ${promptLength}, then ${decodeSteps} per sequence; medians of alternating rounds)\n` +
    "               batched: wall   cpu  thread-cpu | one-at-a-time: wall   cpu  thread-cpu | speed-up cpu (thread)  rounds  per-round speed-ups",
);
const decodeRows: Array<{ n: number; batched: DecodeRate; single: DecodeRate }> = [];
for (const n of widths) {
  const { batched, single, rounds, speedups } = decodeRates(n);
  decodeRows.push({ n, batched, single });
  console.log(
    `  ${String(n).padStart(2)} concurrent ${fmt(batched.wall)}${fmt(batched.cpu)}${fmt(batched.thread)}    ${fmt(single.wall)}${fmt(single.cpu)}${fmt(single.thread)}    ${fmt(batched.cpu / single.cpu, 2)}x (${(batched.thread / single.thread).toFixed(2)}x)  ${String(rounds).padStart(5)}   ${Math.min(...speedups).toFixed(2)}..${Math.max(...speedups).toFixed(2)}`,
  );
}

interface SchedulerRate extends Rate {
  /** Longest this thread's event loop went without running a 5 ms timer, ms (an HTTP request could wait that long). */
  loopGapMaxMs: number;
}

/** `sequences` jobs through `generator`, `concurrent` in flight at a time; generated tokens/s. */
async function schedulerRate(generator: Generator, concurrent: number, sequences: number): Promise<SchedulerRate> {
  // A timer, not perf_hooks' monitorEventLoopDelay: its histogram reported 183 ms where the loop was blocked 1.6 s.
  let last = performance.now();
  let loopGapMaxMs = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    loopGapMaxMs = Math.max(loopGapMaxMs, now - last);
    last = now;
  }, 5);
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  let next = 0;
  let generated = 0;
  const lane = async () => {
    while (next < sequences) {
      const i = next++;
      const result = await generator.generate({
        prompt: tokensOf(promptLength, 1000 + i),
        maxTokens: 32,
        temperature: 1,
        topP: 1,
        seed: i,
      });
      generated += result.tokens.length;
    }
  };
  await Promise.all(Array.from({ length: concurrent }, lane));
  const c = process.cpuUsage(c0);
  clearInterval(timer);
  loopGapMaxMs = Math.max(loopGapMaxMs, performance.now() - last);
  return {
    wall: generated / ((performance.now() - t0) / 1000),
    cpu: generated / ((c.user + c.system) / 1e6),
    loopGapMaxMs,
  };
}

console.log(
  "\nthrough the scheduler (prompt 64 + 32 tokens)    tokens/s wall   tokens/s cpu   HTTP thread blocked at most (ms)",
);
const schedulerRows: Record<string, SchedulerRate> = {};
// A device backend decodes on the HTTP thread (trainer-image/policy-server/app.ts); webgpu's
// device thread belongs to this one, so no decode worker is measured there.
const places = info.name === "webgpu" ? (["in-thread"] as const) : (["worker", "in-thread"] as const);
if (info.name === "webgpu")
  console.log("  worker: not measured on webgpu (a device backend decodes on the HTTP thread)");
for (const where of places) {
  const generator: Generator =
    where === "worker"
      ? new ThreadedScheduler(policy, { capacity: 64, stopTokenIds: [], contextLength: config.contextLength })
      : new BatchScheduler(policy.createDecoder(64), { stopTokenIds: [], contextLength: config.contextLength });
  if (generator instanceof ThreadedScheduler) await generator.ready;
  // Warm-up at both widths: the worker is a fresh V8 isolate (this one was warmed by the decoder
  // runs above); its decode loops must be optimised for 1-slot and 64-slot steps before timing.
  await schedulerRate(generator, 64, 64);
  await schedulerRate(generator, 1, 8);
  for (const [concurrent, sequences] of [
    [64, 64],
    [1, 16],
  ] as const) {
    const r = await schedulerRate(generator, concurrent, sequences);
    schedulerRows[`${where} ${concurrent}`] = r;
    console.log(
      `  ${where.padEnd(9)} ${String(concurrent).padStart(2)} concurrent                    ${fmt(r.wall)}       ${fmt(r.cpu)}       ${fmt(r.loopGapMaxMs, 1)}`,
    );
  }
  await generator.stop();
}

// Training: one Adam step over 8 sequences of 256 tokens (fewer where the context is shorter).
const trainLength = Math.min(256, config.contextLength);
const batch = Array.from({ length: 8 }, (_, i) => Int32Array.from(tokensOf(trainLength, 100 + i)));
const batchTokens = 8 * trainLength;
const loss = (logp: tf.Tensor2D) => tf.div(tf.neg(tf.sum(logp)), batchTokens) as tf.Scalar;
policy.trainStep(batch, 1, loss);
const tensorsBefore = tf.memory().numTensors;
// At least 10 steps (the bar for a training figure; a step takes ~1 s, so BENCH_SECONDS
// alone gave two, and trainMatmulFraction spread 0.26..0.36 over three runs).
// BENCH_SECONDS under 1 is a smoke run (the summary test's): one step.
const train = rate(batchTokens, () => policy.trainStep(batch, 1, loss), Number.POSITIVE_INFINITY, seconds < 1 ? 1 : 10);
const tensorsAfter = tf.memory().numTensors;
const forward = rate(batchTokens, () => policy.logProbs(batch, 1), 3);
matmulGflops = measureMatmul(3);
a.dispose();
b.dispose();
console.log(
  `\ntraining tokens/s (8 x ${trainLength}, Adam):  ${fmt(train.wall)} wall  ${fmt(train.cpu)} cpu   (tensors ${tensorsBefore} -> ${tensorsAfter})`,
);
console.log(`log-probs tokens/s (forward only): ${fmt(forward.wall)} wall  ${fmt(forward.cpu)} cpu`);

// FLOPs: 2 per weight per token forward, ×3 with the backward. Attention counts the causal work
// only, 4·d per (query, visible key), (L+1)/2 keys per query on average: what the math needs, not
// what an implementation computes (the training path skips key blocks past each query block but
// still computes the masked half of the diagonal blocks; counting those would reward waste).
const trainFlopsPerToken = 3 * (2 * denseParams + config.layers * 4 * ((trainLength + 1) / 2) * d);
const decodeFlopsPerToken = 2 * denseParams + config.layers * 4 * (promptLength + decodeSteps / 2) * d;
console.log(
  `\nachieved GFLOP/s (fraction of matMul 512x512: median of ${matmulRounds.length} rounds, ${matmulGflops.cpu.toFixed(1)} GFLOP/s cpu)`,
);
console.log("                                                        wall              cpu");
const line = (name: string, r: Rate, flops: number) =>
  console.log(
    `  ${name.padEnd(40)} ${fmt((r.wall * flops) / 1e9, 2)} (${fmt((100 * r.wall * flops) / 1e9 / matmulGflops.wall, 1)}%) ${fmt((r.cpu * flops) / 1e9, 2)} (${fmt((100 * r.cpu * flops) / 1e9 / matmulGflops.cpu, 1)}%)`,
  );
line("training", train, trainFlopsPerToken);
for (const row of decodeRows) line(`decode ${row.n} concurrent, batched`, row.batched, decodeFlopsPerToken);
for (const row of decodeRows) line(`decode ${row.n} concurrent, one-at-a-time`, row.single, decodeFlopsPerToken);
policy.dispose();
console.log(`\nbench finished in ${((performance.now() - started) / 1000).toFixed(1)} s`);
// Figures of a width or place not measured (--widths without 64, the worker on webgpu) read null.
const wide = decodeRows.find((row) => row.n === 64);
const round = (x: number | undefined, digits: number) => (x === undefined ? null : figure(Number(x.toFixed(digits))));
printSummary(PolicySummary, {
  decodeSpeedup64: round(wide && wide.batched.cpu / wide.single.cpu, 2),
  decodeTokPerS64: round(wide?.batched.cpu, 0),
  decodeTokPerS1: round(wide?.single.cpu, 0),
  decodeSpeedup64Thread: round(wide && wide.batched.thread / wide.single.thread, 2),
  decodeTokPerS64Thread: round(wide?.batched.thread, 0),
  decodeTokPerS1Thread: round(wide?.single.thread, 0),
  trainTokPerS: round(train.cpu, 0),
  workerTokPerS64: round(schedulerRows["worker 64"]?.cpu, 0),
  inThreadTokPerS64: round(schedulerRows["in-thread 64"]?.cpu, 0),
  workerTokPerS1: round(schedulerRows["worker 1"]?.cpu, 0),
  inThreadTokPerS1: round(schedulerRows["in-thread 1"]?.cpu, 0),
  workerLoopGapMs64: round(schedulerRows["worker 64"]?.loopGapMaxMs, 1),
  inThreadLoopGapMs64: round(schedulerRows["in-thread 64"]?.loopGapMaxMs, 1),
  trainMatmulFraction: round((train.cpu * trainFlopsPerToken) / 1e9 / matmulGflops.cpu, 3),
  matmulGflops: round(matmulGflops.cpu, 2),
  loadAverage: Number(loadavg()[0]!.toFixed(2)),
});
