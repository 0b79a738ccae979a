/**
 * Entry of the decode worker thread (started by ThreadedScheduler): the BatchScheduler and its
 * KvDecoder run here, so the HTTP thread answers requests while a prefill or a decode step runs.
 * TF.js backends are per thread: this one initialises its own (the same kind as the HTTP thread's)
 * and builds its own copy of the weights from the buffers it is handed.
 */
import { parentPort } from "node:worker_threads";
import type { ModelConfig } from "../../shared/config/policy.ts";
import { createLogger } from "../../shared/log.ts";
import { initBackend } from "../../shared/model/backend.ts";
import { TransformerPolicy } from "../../shared/model/transformer.ts";
import { BatchScheduler } from "./scheduler.ts";
import { type FromWorker, type PolicyWeights, ToWorker } from "./workerProtocol.ts";

const port = parentPort;
if (!port) throw new Error("decodeWorker.ts runs as a worker thread (started by ThreadedScheduler)");

/** Counters are posted at most this often while work is in flight (replies also carry them). */
const STATS_EVERY_MS = 10;

function post(message: FromWorker): void {
  port?.postMessage(message);
}

// Log lines go to the HTTP thread's logger, so they reach the same destination as the rest.
const log = createLogger({ thread: "decode" }, { write: (line: string) => post({ type: "log", line }) });

function toPolicy(weights: PolicyWeights): TransformerPolicy {
  const values = new Map(weights.names.map((name, i) => [name, weights.values[i] as Float32Array]));
  return new TransformerPolicy(weights.config, values, weights.version, { trainable: false });
}

/** Why weights of config `b` cannot replace those of `a` in a running decoder, or undefined. */
function configMismatch(a: ModelConfig, b: ModelConfig): string | undefined {
  for (const key of Object.keys(a) as Array<keyof ModelConfig>)
    if (a[key] !== b[key]) return `config.${key} differs (${a[key]} → ${b[key]}); the KV cache would not fit`;
  return undefined;
}

let scheduler: BatchScheduler | undefined;
let current: TransformerPolicy | undefined;
const aborts = new Map<number, AbortController>();
/** Aborts that overtook their generate message (aborts skip the queue while init runs). */
const abortedEarly = new Set<number>();
let lastStats = "";
let statsTimer: NodeJS.Timeout | undefined;

function stats() {
  return (scheduler as BatchScheduler).stats();
}

/**
 * Posts the counters when they changed; runs on a timer between steps (the loop yields to the
 * event loop) while sequences are queued or running, and stops once none are: an idle server's
 * counters change only with a reply, which carries them.
 */
function postStatsIfChanged(): void {
  if (!scheduler) return;
  const now = stats();
  const key = JSON.stringify(now);
  if (key !== lastStats) {
    lastStats = key;
    post({ type: "stats", stats: now });
  }
  if (now.active === 0 && now.queued === 0) stopStatsTimer();
}

function startStatsTimer(): void {
  statsTimer ??= setInterval(postStatsIfChanged, STATS_EVERY_MS);
}

function stopStatsTimer(): void {
  clearInterval(statsTimer);
  statsTimer = undefined;
}

async function handle(message: ToWorker): Promise<void> {
  if (message.type !== "init" && message.type !== "stop" && message.type !== "abort" && !scheduler) {
    // init failed (the HTTP thread was told): answer instead of throwing in this thread.
    const reply = { id: message.id, message: "the decode worker did not start" };
    post(message.type === "switch" ? { type: "switchFailed", ...reply } : { type: "failed", ...reply });
    return;
  }
  switch (message.type) {
    case "init": {
      try {
        await initBackend(message.backend);
        current = toPolicy(message.weights);
        scheduler = new BatchScheduler(current.createDecoder(message.capacity), {
          stopTokenIds: message.stopTokenIds,
          contextLength: message.contextLength,
          log,
        });
      } catch (error) {
        post({ type: "initFailed", message: (error as Error).message });
        return;
      }
      post({ type: "ready", stats: stats() });
      return;
    }
    case "generate": {
      const { id, job } = message;
      if (abortedEarly.delete(id)) {
        post({ type: "failed", id, message: "request aborted", stats: stats() });
        return;
      }
      const controller = new AbortController();
      aborts.set(id, controller);
      startStatsTimer();
      (scheduler as BatchScheduler)
        .generate({ ...job, signal: controller.signal })
        .then(
          (result) => post({ type: "result", id, result, stats: stats() }),
          (error: Error) => post({ type: "failed", id, message: error.message, stats: stats() }),
        )
        .finally(() => aborts.delete(id));
      return;
    }
    case "abort": {
      const controller = aborts.get(message.id);
      if (controller) controller.abort();
      else abortedEarly.add(message.id);
      return;
    }
    case "switch": {
      const { id } = message;
      const mismatch = current ? configMismatch(current.config, message.weights.config) : undefined;
      if (mismatch) {
        // Refused before the loop sees it: the running sequences keep decoding on the old weights.
        post({ type: "switchFailed", id, message: mismatch, stats: stats() });
        return;
      }
      let next: TransformerPolicy;
      try {
        next = toPolicy(message.weights);
      } catch (error) {
        post({ type: "switchFailed", id, message: (error as Error).message, stats: stats() });
        return;
      }
      try {
        const previous = await (scheduler as BatchScheduler).switchPolicy(next);
        // Superseded (-1): `next` never ran; otherwise the replaced weights are no longer used.
        if (previous === -1) next.dispose();
        else {
          current?.dispose();
          current = next;
        }
        post({ type: "switched", id, previous, stats: stats() });
      } catch (error) {
        next.dispose();
        post({ type: "switchFailed", id, message: (error as Error).message, stats: stats() });
      }
      return;
    }
    case "stop":
      stopStatsTimer();
      await scheduler?.stop();
      current?.dispose();
      post({ type: "stopped" });
      port?.close();
      return;
  }
}

// Messages are handled in order: everything after `init` waits for the backend and the weights.
let chain: Promise<void> = Promise.resolve();
port.on("message", (raw: unknown) => {
  const message = ToWorker.parse(raw);
  // Aborts must not wait behind a switch in progress.
  if (message.type === "abort") {
    void handle(message);
    return;
  }
  const previous = chain;
  chain = previous.then(() => {
    // A switch is awaited by its own promise, not by the chain: generate requests keep flowing.
    const done = handle(message);
    return message.type === "init" || message.type === "stop" ? done : undefined;
  });
});
