/**
 * The last line of a bench's output: one JSON object with its headline figures under stable keys,
 * so a script (or a test) reads the figures without parsing the table above it.
 */
import { loadavg } from "node:os";
import { z } from "zod";

/** A measured figure; null where a run left it out (a skipped phase), never NaN (JSON has none). */
const Figure = z.number().nullable();

/** `npm run bench:pipeline`. */
export const PipelineSummary = z.object({
  /** Async over sync trajectories/s reaching the trainer, steady state. */
  asyncOverSync: Figure,
  /** The upper bound on that ratio (bench/pipelineBound.ts). */
  bound: Figure,
  asyncTrajPerS: Figure,
  syncTrajPerS: Figure,
  /** "window" or "slots": what the async bound is limited by. */
  limitedBy: z.string(),
  /** Async with the other trainer niceness of --compare-nice (+5, or 0 under --trainer-nice); null without it. */
  asyncCompareNiceTrajPerS: Figure,
  load1: z.number(),
});
export type PipelineSummary = z.infer<typeof PipelineSummary>;

/** `npm run bench:transport`. */
export const TransportSummary = z.object({
  /** send+receive+delete cycles per second, one message at a time, local transport. */
  localMsgPerS: Figure,
  /** The same in batches of 10. */
  localBatchedMsgPerS: Figure,
  /** The same two per second of the bench process's CPU time: steadier than wall clock on a loaded machine. */
  localMsgPerCpuS: Figure,
  localBatchedMsgPerCpuS: Figure,
  localPutP50Ms: Figure,
  localGetP50Ms: Figure,
  /** A message's time from its send to another process's long-polling receive (ms, p50). */
  localWakeP50Ms: Figure,
  /** CPU of that other process while it long-polls an empty queue, % of a core. */
  localIdleConsumerCpuPercent: Figure,
  /** The aws transport on moto; null with --local-only. */
  motoMsgPerS: Figure,
  motoBatchedMsgPerS: Figure,
  motoPutP50Ms: Figure,
  motoGetP50Ms: Figure,
  motoWakeP50Ms: Figure,
  motoIdleConsumerCpuPercent: Figure,
  load1: z.number(),
});
export type TransportSummary = z.infer<typeof TransportSummary>;

/** `npm run bench:policy` (tokens/s are per CPU second). */
export const PolicySummary = z.object({
  /** Batched decode over one sequence at a time, 64 concurrent. */
  decodeSpeedup64: Figure,
  decodeTokPerS64: Figure,
  decodeTokPerS1: Figure,
  /** The same three per second of the decoding thread's own CPU time (V8's GC helper threads left out). */
  decodeSpeedup64Thread: Figure,
  decodeTokPerS64Thread: Figure,
  decodeTokPerS1Thread: Figure,
  trainTokPerS: Figure,
  /** Through the scheduler, decode in its worker thread and in this thread. */
  workerTokPerS64: Figure,
  inThreadTokPerS64: Figure,
  workerTokPerS1: Figure,
  inThreadTokPerS1: Figure,
  /** The longest the HTTP thread's event loop went without turning, 64 concurrent. */
  workerLoopGapMs64: Figure,
  inThreadLoopGapMs64: Figure,
  /** Training's achieved GFLOP/s over the backend's own 512² matMul. */
  trainMatmulFraction: Figure,
  matmulGflops: Figure,
  loadAverage: z.number(),
});
export type PolicySummary = z.infer<typeof PolicySummary>;

/** `npm run bench:train` (tokens/s are wall clock: the speed-up is what a second core buys in time). */
export const TrainSummary = z.object({
  /** The default model, 8 × 256-token batches, one Adam step each, on one thread. */
  trainTokPerS1Thread: Figure,
  /** The same steps data-parallel over two threads (trainer.dataParallel 2). */
  trainTokPerS2Threads: Figure,
  /** Two threads' tokens/s over one thread's. */
  dataParallelSpeedup: Figure,
  loadAverage: z.number(),
});
export type TrainSummary = z.infer<typeof TrainSummary>;

/** `npm run bench:controller`. */
export const ControllerSummary = z.object({
  p99MsAt1000: Figure,
  /** The highest offered rate kept up, every lower one too. */
  saturationReqPerS: z.number(),
  /** Sessions open throughout (at least). */
  sessionsHeld: z.number(),
  p50MsAt1000: Figure,
  controllerCpuMsPerReqAt1000: Figure,
  /** What one core could carry at the controller's CPU per request at 1,000 req/s. */
  controllerCeilingReqPerS: Figure,
  loadAverage1: Figure,
  cores: z.number(),
});
export type ControllerSummary = z.infer<typeof ControllerSummary>;

/** `npm run bench:os`. */
export const OsSummary = z.object({
  task: z.string(),
  /** Episodes per concurrency level. */
  episodes: z.number(),
  /** Episodes per minute with 1, 2 and 4 at a time; null for a level the run left out. */
  episodesPerMin1: Figure,
  episodesPerMin2: Figure,
  episodesPerMin4: Figure,
  /** Container, init and start script, median over every episode of the run. */
  startP50Ms: Figure,
  /** The first bash_action's answer, median. */
  firstObservationP50Ms: Figure,
  /** Episodes the expert solved, all levels together. */
  expertSolved: z.number(),
  load1: z.number(),
});
export type OsSummary = z.infer<typeof OsSummary>;

/** `npm run bench:os-threads`. */
export const OsThreadsSummary = z.object({
  /** Sessions at a time and rounds of them. */
  concurrency: z.number(),
  rounds: z.number(),
  /** CPU seconds of the whole process (its shell threads included) with the pool capped at 4 idle threads. */
  cappedCpuS: Figure,
  /** The same with the pool sized to the load (the default). */
  sizedCpuS: Figure,
  cappedThreadsStarted: z.number(),
  sizedThreadsStarted: z.number(),
  /** Resident memory with the sized pool's threads idle, MiB. */
  sizedIdleRssMiB: Figure,
  load1: z.number(),
});
export type OsThreadsSummary = z.infer<typeof OsThreadsSummary>;

/** A figure for the summary: rounded to 3 decimals, null when not finite. */
export function figure(x: number | undefined): number | null {
  return x === undefined || !Number.isFinite(x) ? null : Math.round(x * 1000) / 1000;
}

/** The 1-minute load average, to read beside every figure on a shared machine. */
export function load1(): number {
  return figure(loadavg()[0]) ?? 0;
}

/**
 * Writes the summary as the last line of stdout, after checking it against its schema.
 *
 * @example
 * printSummary(TransportSummary, { localMsgPerS: 4077, ... }) // {"localMsgPerS":4077,...}
 */
export function printSummary<T extends z.ZodTypeAny>(schema: T, summary: z.input<T>): void {
  process.stdout.write(`${JSON.stringify(schema.parse(summary))}\n`);
}

/**
 * Reads a bench's output: its last non-empty line, parsed as JSON and checked against `schema`.
 * Throws naming the line when it is not one.
 */
export function parseSummary<T extends z.ZodTypeAny>(schema: T, stdout: string): z.output<T> {
  const last = stdout.trimEnd().split("\n").at(-1) ?? "";
  let json: unknown;
  try {
    json = JSON.parse(last);
  } catch {
    throw new Error(`the last output line is not JSON: ${JSON.stringify(last.slice(0, 200))}`);
  }
  return schema.parse(json);
}
