import { Worker } from "node:worker_threads";
import type { Logger } from "../../shared/log.ts";
import { backendInfo } from "../../shared/model/backend.ts";
import { TransformerPolicy } from "../../shared/model/transformer.ts";
import type { InferencePolicy } from "../../shared/model/types.ts";
import {
  GenerationError,
  type GenerationJob,
  type GenerationResult,
  type Generator,
  type SchedulerStats,
} from "./scheduler.ts";
import { FromWorker, type PolicyWeights, type ToWorker } from "./workerProtocol.ts";

/** Options of a ThreadedScheduler. */
export interface ThreadedSchedulerOptions {
  /** Decoder slots: most sequences decoded together. */
  readonly capacity: number;
  readonly stopTokenIds: readonly number[];
  readonly contextLength: number;
  readonly log?: Logger;
  /**
   * Worker restarts allowed within `restartWindowSeconds`; one more crash and the scheduler stops
   * restarting and fails every request (503) and logs an error. @default 3
   */
  readonly maxRestarts?: number;
  /** @default 60 */
  readonly restartWindowSeconds?: number;
}

interface Outstanding {
  resolve(result: GenerationResult): void;
  reject(error: Error): void;
  readonly cleanup: () => void;
}

interface PendingSwitch {
  readonly policy: InferencePolicy;
  resolve(previous: number): void;
  reject(error: Error): void;
}

/** True for a policy whose weights can be handed to the decode worker (those built by shared/model). */
export function canRunInWorker(policy: InferencePolicy): policy is TransformerPolicy {
  return policy instanceof TransformerPolicy;
}

/**
 * The weights of `policy` as transferable buffers. Why hand the worker weights rather than a store
 * key for it to load: versions reach the server from three places (the checkpoint store, a Hugging
 * Face folder through /update_weights_from_disk, in-memory policies in tests); the HTTP thread
 * already loads and labels each one, so passing the result keeps one loading path and the version
 * label is attached exactly once, to the weights that then produce the tokens.
 */
function weightsOf(policy: TransformerPolicy): { weights: PolicyWeights; transfer: ArrayBuffer[] } {
  const entries = [...policy.values()];
  // values() copies out of the backend, so these buffers are ours to move.
  const values = entries.map(([, value]) => value as Float32Array<ArrayBuffer>);
  return {
    weights: { version: policy.version, config: policy.config, names: entries.map(([name]) => name), values },
    transfer: values.map((value) => value.buffer),
  };
}

function zeroStats(policyVersion: number): SchedulerStats {
  return {
    decodeSteps: 0,
    prefills: 0,
    generatedTokens: 0,
    maxBatch: 0,
    batchedSequenceSteps: 0,
    active: 0,
    queued: 0,
    policyVersion,
    policySwitches: 0,
    completed: 0,
    failed: 0,
    prefixCacheHits: 0,
    prefixCacheReusedTokens: 0,
    prefilledTokens: 0,
  };
}

/**
 * A BatchScheduler in a worker thread (decodeWorker.ts), behind the same Generator interface. The
 * HTTP thread keeps validation, tokenizing and the store follower; the worker runs prefill and
 * decode, so /health, /stats, 429 answers and new requests are served while a step runs.
 *
 * - Aborts: a job's signal rejects it here at once and tells the worker, which frees the slot
 *   before its next step.
 * - stats() reads the counters the worker last posted (at most every 10 ms, and with every reply),
 *   with `queued` counted here so a burst of requests is refused (429) without waiting for the worker.
 * - A worker that dies fails the requests it held (503) and is restarted from the last installed
 *   policy (the caller keeps it alive until it is replaced); after `maxRestarts` crashes within
 *   `restartWindowSeconds` it is not restarted again: every request fails and an error is logged.
 *
 * @example
 * const scheduler = new ThreadedScheduler(policy, { capacity: 64, stopTokenIds: [2], contextLength: 2048 });
 * const result = await scheduler.generate({ prompt, maxTokens: 32, temperature: 1, topP: 1, seed: 7 });
 */
export class ThreadedScheduler implements Generator {
  private worker: Worker | undefined;
  private latest: SchedulerStats;
  private readonly outstanding = new Map<number, Outstanding>();
  private readonly switches = new Map<number, PendingSwitch>();
  private nextId = 0;
  private stopping = false;
  private stopped: Promise<void> | undefined;
  private brokenReason: string | undefined;
  private readonly crashes: number[] = [];
  /** The policy the worker serves (or is being switched to): a restarted worker starts from it. */
  private installed: TransformerPolicy;
  private readonly backend: "wasm" | "cpu" | "tensorflow";
  /** Resolves once the worker has its backend and weights (rejects if it could not start). */
  ready: Promise<void>;
  /** Workers started, the first included (restarts after crashes are the rest). */
  workerStarts = 0;

  constructor(
    policy: InferencePolicy,
    private readonly options: ThreadedSchedulerOptions,
  ) {
    if (!canRunInWorker(policy))
      throw new GenerationError("the decode worker needs a policy built by shared/model (its weights are handed over)");
    const backend = backendInfo()?.name;
    if (backend !== "wasm" && backend !== "cpu" && backend !== "tensorflow")
      throw new GenerationError(
        `the decode worker starts the HTTP thread's TF.js backend, but it is ${backend ?? "not initialised"} (allowed: wasm, cpu, tensorflow)`,
      );
    this.backend = backend;
    this.installed = policy;
    this.latest = zeroStats(policy.version);
    this.ready = this.startWorker();
    // A failed start is reported through generate(); keep the rejection from being unhandled here.
    this.ready.catch(() => undefined);
  }

  get policyVersion(): number {
    return this.latest.policyVersion;
  }

  stats(): SchedulerStats {
    // Requests sent but not yet decoding are queued; counted here, so they show before the worker's next post.
    const queued = Math.max(0, this.outstanding.size - this.latest.active);
    return { ...this.latest, queued };
  }

  generate(job: GenerationJob): Promise<GenerationResult> {
    if (this.stopping) return Promise.reject(new GenerationError("the scheduler is stopped"));
    if (this.brokenReason) return Promise.reject(new GenerationError(this.brokenReason));
    if (job.prompt.length === 0) return Promise.reject(new GenerationError("empty prompt"));
    if (job.prompt.length >= this.options.contextLength)
      return Promise.reject(
        new GenerationError(
          `prompt of ${job.prompt.length} tokens leaves no room in the context window of ${this.options.contextLength}`,
        ),
      );
    if (job.signal?.aborted) return Promise.reject(new GenerationError("request aborted"));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        if (!this.outstanding.delete(id)) return;
        this.send({ type: "abort", id });
        reject(new GenerationError("request aborted"));
      };
      job.signal?.addEventListener("abort", onAbort, { once: true });
      this.outstanding.set(id, { resolve, reject, cleanup: () => job.signal?.removeEventListener("abort", onAbort) });
      this.send({
        type: "generate",
        id,
        job: {
          prompt: [...job.prompt],
          maxTokens: job.maxTokens,
          temperature: job.temperature,
          topP: job.topP,
          seed: job.seed,
        },
      });
    });
  }

  switchPolicy(policy: InferencePolicy): Promise<number> {
    if (this.stopping) return Promise.reject(new GenerationError("the scheduler is stopped"));
    if (this.brokenReason) return Promise.reject(new GenerationError(this.brokenReason));
    if (!canRunInWorker(policy))
      return Promise.reject(new GenerationError("the decode worker needs a policy built by shared/model"));
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.switches.set(id, { policy, resolve, reject });
      const { weights, transfer } = weightsOf(policy);
      this.send({ type: "switch", id, weights }, transfer);
    });
  }

  async stop(): Promise<void> {
    if (this.stopped) return this.stopped;
    this.stopping = true;
    this.stopped = (async () => {
      const worker = this.worker;
      if (worker) {
        const exited = new Promise<void>((resolve) => worker.once("exit", () => resolve()));
        this.send({ type: "stop" });
        // The worker rejects what it holds and exits; a hung one is terminated.
        const timeout = setTimeout(() => void worker.terminate(), 10_000);
        await exited;
        clearTimeout(timeout);
      }
      const stopped = new GenerationError("the policy server is shutting down");
      this.failOutstanding(stopped);
      // A switch the worker did not confirm before exiting never happened.
      for (const pending of this.switches.values()) pending.reject(stopped);
      this.switches.clear();
    })();
    return this.stopped;
  }

  /** Kills the worker thread as a crash would (tests of the restart path). */
  async killWorker(): Promise<void> {
    await this.worker?.terminate();
  }

  private send(message: ToWorker, transfer: ArrayBuffer[] = []): void {
    this.worker?.postMessage(message, transfer);
  }

  private startWorker(): Promise<void> {
    this.workerStarts += 1;
    const worker = new Worker(WORKER_ENTRY, { execArgv: [] });
    this.worker = worker;
    const ready = new Promise<void>((resolve, reject) => {
      worker.on("message", (raw: unknown) => {
        const message = FromWorker.parse(raw);
        if (message.type === "ready") resolve();
        else if (message.type === "initFailed") reject(new GenerationError(`decode worker: ${message.message}`));
        this.receive(message);
      });
      worker.on("error", (error) => {
        this.options.log?.error({ err: error }, "decode worker failed");
        reject(error);
      });
      worker.on("exit", (code) => this.exited(worker, code));
    });
    const { weights, transfer } = weightsOf(this.installed);
    worker.postMessage(
      {
        type: "init",
        backend: this.backend,
        capacity: this.options.capacity,
        stopTokenIds: [...this.options.stopTokenIds],
        contextLength: this.options.contextLength,
        weights,
      } satisfies ToWorker,
      transfer,
    );
    return ready;
  }

  private receive(message: FromWorker): void {
    if ("stats" in message && message.stats) this.latest = message.stats;
    switch (message.type) {
      case "result":
      case "failed": {
        const pending = this.outstanding.get(message.id);
        if (!pending) return; // aborted here already
        this.outstanding.delete(message.id);
        pending.cleanup();
        if (message.type === "result") pending.resolve(message.result);
        else pending.reject(new GenerationError(message.message));
        return;
      }
      case "switched":
      case "switchFailed": {
        const pending = this.switches.get(message.id);
        if (!pending) return;
        this.switches.delete(message.id);
        if (message.type === "switchFailed") {
          pending.reject(new GenerationError(message.message));
          return;
        }
        if (message.previous !== -1 && canRunInWorker(pending.policy)) this.installed = pending.policy;
        pending.resolve(message.previous);
        return;
      }
      case "initFailed":
        this.brokenReason = `the decode worker could not start: ${message.message}`;
        this.options.log?.error({}, this.brokenReason);
        return;
      case "log":
        this.relayLog(message.line);
        return;
      default:
        return;
    }
  }

  private relayLog(line: string): void {
    const log = this.options.log;
    if (!log) return;
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(line) as Record<string, unknown>;
    } catch {
      log.warn({ line }, "decode worker wrote a line that is not JSON");
      return;
    }
    const { level, msg, time: _time, pid: _pid, ...fields } = parsed;
    const text = typeof msg === "string" ? msg : "";
    if (typeof level === "number" && level >= 50) log.error(fields, text);
    else if (typeof level === "number" && level >= 40) log.warn(fields, text);
    else log.info(fields, text);
  }

  private exited(worker: Worker, code: number): void {
    if (worker !== this.worker) return;
    this.worker = undefined;
    if (this.stopping) return;
    const reason = `the decode worker exited (code ${code})`;
    this.failOutstanding(new GenerationError(`${reason}; the request was lost`));
    for (const [id, pending] of this.switches) {
      this.switches.delete(id);
      pending.reject(new GenerationError(`${reason} before the switch`));
    }
    if (this.brokenReason) return;
    const now = Date.now();
    const window = (this.options.restartWindowSeconds ?? 60) * 1000;
    this.crashes.push(now);
    while (this.crashes.length > 0 && (this.crashes[0] as number) < now - window) this.crashes.shift();
    const maxRestarts = this.options.maxRestarts ?? 3;
    if (this.crashes.length > maxRestarts) {
      this.brokenReason = `${reason}: ${this.crashes.length} crashes within ${window / 1000} s, not restarting; restart the policy server`;
      this.options.log?.error({ code, crashes: this.crashes.length }, this.brokenReason);
      return;
    }
    this.options.log?.error({ code, policyVersion: this.installed.version }, `${reason}; restarting it`);
    this.latest = { ...this.latest, active: 0, queued: 0, policyVersion: this.installed.version };
    this.ready = this.startWorker();
    this.ready.catch(() => undefined);
  }

  private failOutstanding(error: Error): void {
    for (const [id, pending] of this.outstanding) {
      this.outstanding.delete(id);
      pending.cleanup();
      pending.reject(error);
    }
  }
}

/** The worker entry is TypeScript: decodeWorker.mjs registers tsx in the worker thread, then loads it. */
const WORKER_ENTRY = new URL("./decodeWorker.mjs", import.meta.url);
