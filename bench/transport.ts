/**
 * `npm run bench:transport`: the local transport and the aws transport on a moto server, side by
 * side, in one bounded run (< 60 s). Per backend: full send+receive+delete cycles per second
 * (one message at a time, and in batches of 10), and put/get latency of 16 KiB objects (p50, p99).
 * Each phase stops at its message/object count or its time cap, whichever comes first.
 * The last line of stdout is the JSON summary (bench/summary.ts `TransportSummary`).
 *
 * Each message phase first runs 0.3 s unmeasured (JIT, caches), then up to 10 s: 3 s phases spread
 * 30% between runs on a quiet machine, 10 s local phases 6–12% (whole runs still vary with the host).
 *
 * The wake phase runs a consumer in another process (bench/transportConsumer.ts): it long-polls
 * while idle for --idle-ms (its CPU use then is what an idle role pays for waiting), then receives
 * 30 messages sent 20-60 ms apart, timing each from its send (what a hop between two roles costs).
 *
 * Flags: --messages N (per message phase, default 100000: local phases run to the time cap),
 * --objects N (per object phase, default 500), --phase-ms X (time cap of a phase, default 10000),
 * --idle-ms X (the wake phase's idle wait, default 5000), --local-only (skip moto: its figures
 * are null in the summary).
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { readScriptArgs } from "../shared/commandLine.ts";
import { TransportConfig } from "../shared/config/transport.ts";
import { createTransport } from "../shared/transport/index.ts";
import type { Transport } from "../shared/transport/types.ts";
import { startMoto } from "../test/support/moto.ts";
import { intFlag } from "./flags.ts";
import { figure, load1, printSummary, TransportSummary } from "./summary.ts";

const SCRIPT = {
  command: "npm run bench:transport --",
  usage: "[--messages N] [--objects N] [--phase-ms MS] [--idle-ms MS] [--local-only]",
};
const { values: flags } = readScriptArgs(SCRIPT, {
  options: {
    messages: { type: "string", default: "100000" },
    objects: { type: "string", default: "500" },
    "phase-ms": { type: "string", default: "10000" },
    "idle-ms": { type: "string", default: "5000" },
    "local-only": { type: "boolean", default: false },
  },
});
// a batch phase sends whole batches: at least one
const MESSAGES_PER_PHASE = intFlag("messages", flags.messages, 10);
const OBJECTS_PER_PHASE = intFlag("objects", flags.objects, 1);
const PHASE_CAP_MS = intFlag("phase-ms", flags["phase-ms"], 1, 60_000);
const IDLE_MS = intFlag("idle-ms", flags["idle-ms"], 1_500, 60_000);
const WAKE_MESSAGES = 30;
const CONSUMER = fileURLToPath(new URL("./transportConsumer.ts", import.meta.url));
const OBJECT_BYTES = 16 * 1024;
const BATCH = 10;
/** Unmeasured start of each message phase. */
const WARMUP_MS = 300;

/**
 * Messages per wall-clock second, and per second of this process's CPU time (all its threads):
 * on a shared machine the wall-clock rate follows the load, the CPU-time rate much less; for the
 * local transport (SQLite and files, in this process) the CPU time is all the work there is.
 */
interface Rate {
  perSecond: number;
  perCpuSecond: number;
  count: number;
}

/** Seconds of this process's CPU time (user + system) since `from`. */
function cpuSeconds(from: NodeJS.CpuUsage): number {
  const used = process.cpuUsage(from);
  return (used.user + used.system) / 1e6;
}

interface Figures {
  unbatched: Rate;
  batched: Rate;
  put: { p50: number; p99: number; count: number };
  get: { p50: number; p99: number; count: number };
  wake: Wake;
}

/** The wake phase: a message's time from its send to another process's receive, and that process's idle CPU. */
interface Wake {
  p50: number;
  p90: number;
  count: number;
  idleCpuPercent: number;
}

/**
 * A message phase: `cycle` (which handles some messages and returns how many) runs WARMUP_MS
 * unmeasured (JIT, SQLite page cache, connection pools), then until the phase's message count or
 * time cap.
 */
async function phase(cycle: () => Promise<number>): Promise<Rate> {
  const warmUntil = performance.now() + WARMUP_MS;
  while (performance.now() < warmUntil) await cycle();
  const started = performance.now();
  const cpu = process.cpuUsage();
  let count = 0;
  while (count < MESSAGES_PER_PHASE && performance.now() - started < PHASE_CAP_MS) count += await cycle();
  const seconds = (performance.now() - started) / 1000;
  return { perSecond: count / seconds, perCpuSecond: count / cpuSeconds(cpu), count };
}

/**
 * Starts the consumer process on `config`, leaves it idle for IDLE_MS, then sends it WAKE_MESSAGES
 * messages (each body its send time) 20-60 ms apart and reads back what it measured.
 */
async function wake(transport: Transport, config: TransportConfig): Promise<Wake> {
  const queue = transport.queue("rollout-requests");
  const child = spawn(process.execPath, ["--import", "tsx", CONSUMER, JSON.stringify(config)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.on("data", (chunk: Buffer) => {
    out += chunk.toString();
  });
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  try {
    while (!out.includes("ready\n")) {
      if (child.exitCode !== null) throw new Error(`bench: the wake consumer exited early (${child.exitCode})`);
      await sleep(20);
    }
    await sleep(IDLE_MS);
    for (let i = 0; i < WAKE_MESSAGES; i++) {
      await queue.send(String(performance.timeOrigin + performance.now()));
      await sleep(20 + Math.random() * 40);
    }
    await queue.send("end");
    if ((await exited) !== 0) throw new Error("bench: the wake consumer failed");
  } finally {
    child.kill();
  }
  const report = JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as { latenciesMs: number[]; idleCpuPercent: number };
  const sorted = [...report.latenciesMs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
  return { p50: at(0.5), p90: at(0.9), count: sorted.length, idleCpuPercent: report.idleCpuPercent };
}

async function measure(transport: Transport, config: TransportConfig): Promise<Figures> {
  const queue = transport.queue("rollout-requests");
  const body = JSON.stringify({ schemaVersion: 1, kind: "bench", padding: "x".repeat(200) });

  // One message at a time: send, receive, delete.
  const unbatched = await phase(async () => {
    await queue.send(body);
    const [message] = await queue.receive({ maxMessages: 1 });
    if (!message) throw new Error("bench: a sent message was not received");
    await queue.delete(message.receiptHandle);
    return 1;
  });

  // Batches of 10: sendBatch, receive up to 10, delete each.
  const bodies = Array.from({ length: BATCH }, () => body);
  const batched = await phase(async () => {
    await queue.sendBatch(bodies);
    let left = BATCH;
    while (left > 0) {
      const messages = await queue.receive({ maxMessages: BATCH, waitSeconds: 1 });
      if (messages.length === 0) throw new Error("bench: sent messages were not received");
      await Promise.all(messages.map((m) => queue.delete(m.receiptHandle)));
      left -= messages.length;
    }
    return BATCH;
  });

  // 16 KiB objects: sequential puts of distinct keys, then gets of the same keys.
  const store = transport.store("trajectories");
  const object = new Uint8Array(OBJECT_BYTES).map((_, i) => i % 251);
  const putMs: number[] = [];
  let started = performance.now();
  while (putMs.length < OBJECTS_PER_PHASE && performance.now() - started < PHASE_CAP_MS) {
    const t0 = performance.now();
    await store.put(`bench/obj-${putMs.length}`, object);
    putMs.push(performance.now() - t0);
  }
  const getMs: number[] = [];
  started = performance.now();
  while (getMs.length < putMs.length && performance.now() - started < PHASE_CAP_MS) {
    const t0 = performance.now();
    const data = await store.get(`bench/obj-${getMs.length}`);
    getMs.push(performance.now() - t0);
    if (data?.length !== OBJECT_BYTES) throw new Error("bench: object came back wrong");
  }

  return {
    unbatched,
    batched,
    put: { ...percentiles(putMs), count: putMs.length },
    get: { ...percentiles(getMs), count: getMs.length },
    wake: await wake(transport, config),
  };
}

function percentiles(samples: number[]): { p50: number; p99: number } {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
  return { p50: at(0.5), p99: at(0.99) };
}

function row(label: string, local: string, moto: string): string {
  return `${label.padEnd(46)} | ${local.padEnd(26)} | ${moto}`;
}

async function main(): Promise<void> {
  const benchStarted = performance.now();
  const loadBefore = load1();
  const localDir = await mkdtemp(join(tmpdir(), "agentrl-bench-transport-"));
  const moto = flags["local-only"] ? undefined : await startMoto();
  try {
    const localConfig = TransportConfig.parse({ kind: "local", localDir });
    const local = await createTransport(localConfig);
    process.stderr.write("bench: local transport...\n");
    const l = await measure(local, localConfig);
    await local.close();
    let m: Figures | undefined;
    if (moto) {
      const awsConfig = TransportConfig.parse({ kind: "aws", endpoint: moto.endpoint, queuePrefix: "bench" });
      const aws = await createTransport(awsConfig, { ensureResources: true });
      process.stderr.write("bench: aws transport on moto...\n");
      m = await measure(aws, awsConfig);
      await aws.close();
    }

    const skipped = "skipped (--local-only)";
    const rate = (f: Rate | undefined) => (f ? `${f.perSecond.toFixed(0)} (n=${f.count})` : skipped);
    const cpuRate = (f: Rate | undefined) => (f ? f.perCpuSecond.toFixed(0) : skipped);
    const lat = (f: { p50: number; p99: number; count: number } | undefined) =>
      f ? `${f.p50.toFixed(2)} / ${f.p99.toFixed(2)} (n=${f.count})` : skipped;
    const wakeLat = (f: Wake | undefined) => (f ? `${f.p50.toFixed(2)} / ${f.p90.toFixed(2)} (n=${f.count})` : skipped);
    const idle = (f: Wake | undefined) => (f ? `${f.idleCpuPercent.toFixed(2)} (${IDLE_MS / 1000} s)` : skipped);
    const lines = [
      `transport bench: ${new Date().toISOString()}, node ${process.version}, phases capped at ${PHASE_CAP_MS / 1000} s, ${MESSAGES_PER_PHASE} messages / ${OBJECTS_PER_PHASE} objects; load average ${loadBefore} before, ${load1()} after`,
      row("metric", "local (SQLite + directory)", "aws on moto (SQS + S3 API)"),
      row("send+receive+delete, 1 at a time (msg/s)", rate(l.unbatched), rate(m?.unbatched)),
      row(`send+receive+delete, batches of ${BATCH} (msg/s)`, rate(l.batched), rate(m?.batched)),
      row("  1 at a time, per CPU second of this process", cpuRate(l.unbatched), "- (moto's CPU is elsewhere)"),
      row(`  batches of ${BATCH}, per CPU second of this process`, cpuRate(l.batched), "-"),
      row(`put ${OBJECT_BYTES / 1024} KiB object, p50 / p99 (ms)`, lat(l.put), lat(m?.put)),
      row(`get ${OBJECT_BYTES / 1024} KiB object, p50 / p99 (ms)`, lat(l.get), lat(m?.get)),
      row("send to other process's receive, p50/p90 (ms)", wakeLat(l.wake), wakeLat(m?.wake)),
      row(`idle long-polling consumer (% of a core)`, idle(l.wake), idle(m?.wake)),
      `total ${((performance.now() - benchStarted) / 1000).toFixed(1)} s`,
    ];
    process.stdout.write(`${lines.join("\n")}\n`);
    printSummary(TransportSummary, {
      localMsgPerS: figure(l.unbatched.perSecond),
      localBatchedMsgPerS: figure(l.batched.perSecond),
      localMsgPerCpuS: figure(l.unbatched.perCpuSecond),
      localBatchedMsgPerCpuS: figure(l.batched.perCpuSecond),
      localPutP50Ms: figure(l.put.p50),
      localGetP50Ms: figure(l.get.p50),
      localWakeP50Ms: figure(l.wake.p50),
      localIdleConsumerCpuPercent: figure(l.wake.idleCpuPercent),
      motoMsgPerS: figure(m?.unbatched.perSecond),
      motoBatchedMsgPerS: figure(m?.batched.perSecond),
      motoPutP50Ms: figure(m?.put.p50),
      motoGetP50Ms: figure(m?.get.p50),
      motoWakeP50Ms: figure(m?.wake.p50),
      motoIdleConsumerCpuPercent: figure(m?.wake.idleCpuPercent),
      load1: load1(),
    });
  } finally {
    await moto?.stop();
    await rm(localDir, { recursive: true, force: true });
  }
}

await main();
