import { Worker } from "node:worker_threads";
import type * as tf from "@tensorflow/tfjs";
import type { ModelConfig } from "../config/policy.ts";
import { AgentRlError } from "../errors.ts";
import type { Logger } from "../log.ts";
import { backendInfo } from "./backend.ts";
import { missingNodeFlags } from "./dataParallelFlags.ts";
import { FromReplica, type ReplicaWeights, type ToReplica } from "./dataParallelProtocol.ts";
import { ModelInputError, type TransformerPolicy } from "./transformer.ts";

/**
 * Data-parallel training over threads. TF.js's wasm backend runs one thread per backend in Node,
 * so a second core is used by a second thread with its own backend and its own replica of the
 * weights. A step splits the batch's rows into one shard per thread (balanced by estimated
 * compute); each thread computes its shard's summed gradient (losses are normalised by a
 * whole-batch denominator, so shard gradients add up to the batch gradient) and writes it into
 * its slot of one SharedArrayBuffer; then every thread adds the slots in the same order and takes
 * the same clipping + Adam step, so the replicas stay bitwise equal without sending weights.
 *
 * The main thread's policy stays the source of truth (checkpoints, publishing, learning-rate
 * schedules, version): the replicas are given its optimizer settings with every step and its
 * weights again whenever its step count moved without them.
 *
 * A loss is a module both threads import (its URL travels to the workers), so each shard runs
 * the same code; `shared/` stays free of role code (the PPO and NLL losses live in their roles).
 */

/** A loss built for one step's batch on one thread. */
export interface ShardLoss<S> {
  /**
   * This micro-batch's share of the batch loss. `logp` is [rows.length, T] (as in
   * TrainablePolicy.trainStep); `rows` are indices into the step's whole batch, not the shard.
   */
  loss(logp: tf.Tensor2D, rows: readonly number[]): tf.Scalar;
  /** What the shard collected beside the loss (structured-cloneable: it may cross threads). */
  stats(): S;
}

/** A loss module: its default export, identical in every thread. */
export interface ShardLossModule<I, S> {
  /** The module's own URL (`import.meta.url`): what a replica thread imports. */
  readonly url: string;
  /** The loss of one step over `input` (the same value on every thread, structured-cloned to the workers). */
  build(input: I): ShardLoss<S>;
  /** Combines two shards' stats (shard order: a is the earlier shard). */
  merge(a: S, b: S): S;
}

/**
 * Declares a loss module; `url` must be the module's `import.meta.url`.
 * @example export default defineShardLoss(import.meta.url, { build: (input) => ..., merge: (a, b) => ... });
 */
export function defineShardLoss<I, S>(url: string, parts: Omit<ShardLossModule<I, S>, "url">): ShardLossModule<I, S> {
  return { url, ...parts };
}

/** A data-parallel step failed: a replica thread crashed, failed, or disagreed with the main thread. */
export class DataParallelError extends AgentRlError {
  override readonly name = "DataParallelError";
}

/** What one step returns. */
export interface ParallelStepResult<S> {
  readonly loss: number;
  readonly gradNorm: number;
  readonly stats: S;
  /** Threads that computed this step (1 after a replica was lost). */
  readonly threads: number;
  /**
   * Where the step's time went, ms: this thread's shard, the slowest replica's shard (measured in
   * it), the wait for the replicas after this thread's shard, and the summed Adam step here. On
   * an idle second core `waitMs` is near 0; a replica that shares this thread's core shows its
   * whole shard there.
   */
  readonly timings?: { shardMs: number; replicaShardMs: number; waitMs: number; applyMs: number };
}

/**
 * Relative cost of a training row of `length` tokens: 2 FLOPs per dense weight per token plus
 * full-width attention scores (4·L·d per token per layer), so long rows weigh more than their length.
 */
export function rowCost(config: ModelConfig, length: number): number {
  const d = config.dModel;
  const hd = d / config.heads;
  const dense =
    config.layers * (d * (config.heads + 2 * config.kvHeads) * hd + config.heads * hd * d + 3 * d * config.ffnHidden) +
    d * config.vocabSize;
  return length * (2 * dense + 4 * config.layers * d * length);
}

/**
 * Splits rows 0..costs.length−1 into `shards` sets of near-equal total cost (longest first, each
 * to the least loaded shard), each set in ascending row order (micro-batches stay consecutive).
 * @example shardRows([4, 1, 1, 2], 2) // [[0], [1, 2, 3]]
 */
export function shardRows(costs: readonly number[], shards: number): number[][] {
  const load = new Array<number>(shards).fill(0);
  const out: number[][] = Array.from({ length: shards }, () => []);
  const order = costs.map((_, i) => i).sort((a, b) => (costs[b] as number) - (costs[a] as number) || a - b);
  for (const row of order) {
    let best = 0;
    for (let s = 1; s < shards; s++) if ((load[s] as number) < (load[best] as number)) best = s;
    load[best] = (load[best] as number) + (costs[row] as number);
    out[best]?.push(row);
  }
  for (const rows of out) rows.sort((a, b) => a - b);
  return out;
}

/** Float offsets of each parameter (checkpoint order) in a flattened gradient, and the total. */
export function gradientLayout(policy: TransformerPolicy): { offsets: number[]; total: number } {
  const offsets: number[] = [];
  let total = 0;
  for (const variable of policy.params.values()) {
    offsets.push(total);
    total += variable.size;
  }
  return { offsets, total };
}

/**
 * The shard's summed gradient over `rows` of the batch written into `slot` (flattened, checkpoint
 * order), and its loss and stats. An empty shard writes zeros. Runs the same on every thread.
 */
export function computeShard<S>(
  policy: TransformerPolicy,
  loss: ShardLoss<S>,
  sequences: readonly Int32Array[],
  rows: readonly number[],
  temperature: number,
  slot: Float32Array,
): { loss: number; stats: S } {
  if (rows.length === 0) {
    slot.fill(0);
    return { loss: 0, stats: loss.stats() };
  }
  const { loss: value, grads } = policy.gradients(sequences, temperature, (logp, local) =>
    loss.loss(
      logp,
      local.map((i) => rows[i] as number),
    ),
  );
  let offset = 0;
  for (const name of policy.params.keys()) {
    const grad = grads.get(name) as Float32Array;
    slot.set(grad, offset);
    offset += grad.length;
  }
  return { loss: value, stats: loss.stats() };
}

/**
 * g₀ + g₁ + … in slot order, per parameter: every thread forms the same float32 sums, so every
 * replica takes the same Adam step.
 */
export function sumSlots(policy: TransformerPolicy, shared: Float32Array, threads: number): Map<string, Float32Array> {
  const { offsets, total } = gradientLayout(policy);
  const sum = Float32Array.from(shared.subarray(0, total));
  for (let k = 1; k < threads; k++) {
    const slot = shared.subarray(k * total, (k + 1) * total);
    for (let i = 0; i < total; i++) sum[i] = (sum[i] as number) + (slot[i] as number);
  }
  const out = new Map<string, Float32Array>();
  [...policy.params].forEach(([name, variable], i) => {
    const at = offsets[i] as number;
    out.set(name, sum.subarray(at, at + variable.size));
  });
  return out;
}

/** Weights, step and Adam state of `policy`, copied out (checkpoint order). */
export function replicaWeights(policy: TransformerPolicy): ReplicaWeights {
  const state = policy.optimizerState();
  const names = [...policy.params.keys()];
  return {
    values: [...policy.values().values()],
    step: policy.step,
    ...(state
      ? {
          state: {
            t: state.t,
            m: names.map((n) => state.m.get(n) as Float32Array),
            v: names.map((n) => state.v.get(n) as Float32Array),
          },
        }
      : {}),
  };
}

/** The buffers of `weights`, to transfer rather than copy. */
function transferOf(weights: ReplicaWeights): ArrayBuffer[] {
  const arrays = [...weights.values, ...(weights.state?.m ?? []), ...(weights.state?.v ?? [])];
  return arrays.map((a) => a.buffer as ArrayBuffer);
}

interface Pending {
  readonly types: readonly FromReplica["type"][];
  resolve(message: FromReplica): void;
  reject(error: Error): void;
}

/** One replica thread, its pending replies and why it is gone. */
class Replica {
  private readonly pending = new Map<number, Pending>();
  private ready: Pending | undefined;
  /** Why this replica can no longer be used (it crashed, failed to start, or diverged). */
  lost: string | undefined;
  /** Resolves when the thread has exited. */
  readonly exited: Promise<void>;

  constructor(
    readonly worker: Worker,
    readonly slot: number,
  ) {
    worker.on("message", (raw: unknown) => this.receive(raw));
    worker.on("error", (error) => this.fail(`data-parallel replica ${slot} failed: ${error.message}`));
    this.exited = new Promise((resolve) =>
      worker.once("exit", (code) => {
        this.fail(`data-parallel replica ${slot} exited (code ${code})`);
        resolve();
      }),
    );
  }

  whenReady(): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.lost) reject(new DataParallelError(this.lost));
      else this.ready = { types: ["ready"], resolve: () => resolve(), reject };
    });
  }

  /** Resolves with the reply of type `types` to request `id`; rejects if the thread goes first. */
  reply(id: number, types: readonly FromReplica["type"][]): Promise<FromReplica> {
    return new Promise((resolve, reject) => {
      if (this.lost) reject(new DataParallelError(this.lost));
      else this.pending.set(id, { types, resolve, reject });
    });
  }

  send(message: ToReplica, transfer: ArrayBuffer[] = []): void {
    if (!this.lost) this.worker.postMessage(message, transfer);
  }

  private receive(raw: unknown): void {
    const parsed = FromReplica.safeParse(raw);
    if (!parsed.success) {
      this.fail(`data-parallel replica ${this.slot} sent a malformed message: ${parsed.error.message}`);
      void this.worker.terminate();
      return;
    }
    const message = parsed.data;
    if (message.type === "ready" || message.type === "initFailed") {
      const ready = this.ready;
      this.ready = undefined;
      if (message.type === "ready") ready?.resolve(message);
      else {
        this.lost = `data-parallel replica ${this.slot} could not start: ${message.message}`;
        ready?.reject(new DataParallelError(this.lost));
      }
      return;
    }
    const pending = this.pending.get(message.id);
    if (!pending?.types.includes(message.type)) return;
    this.pending.delete(message.id);
    pending.resolve(message);
  }

  private fail(reason: string): void {
    this.lost ??= reason;
    const error = new DataParallelError(this.lost);
    this.ready?.reject(error);
    this.ready = undefined;
    for (const [id, pending] of this.pending) {
      this.pending.delete(id);
      pending.reject(error);
    }
  }
}

/** Options of DataParallelTrainer.start. */
export interface DataParallelOptions<I, S> {
  /** Threads computing each step, this one included; 1 runs everything here. */
  readonly threads: number;
  readonly loss: ShardLossModule<I, S>;
  /**
   * A frozen policy (the KL reference) the replicas keep a copy of, so `logProbs(…, "reference")`
   * is computed on every thread too. @default - none: only the trained weights' log-probs are sharded
   */
  readonly reference?: TransformerPolicy;
  readonly log?: Logger;
}

/**
 * Trains `policy` with its steps spread over `threads` threads (this one and threads − 1 replica
 * workers). A replica that crashes fails the step it was in with a DataParallelError (the weights
 * are left unchanged unless this thread had already applied the summed gradient, in which case the
 * step stands); later steps run on this thread alone, with a warning. Call `close()` when done.
 *
 * @example
 * const parallel = await DataParallelTrainer.start(policy, { threads: 2, loss: nllLoss });
 * const { loss, gradNorm } = await parallel.trainStep(batch, 1, { weights, totalWeight });
 * await parallel.close();
 */
export class DataParallelTrainer<I, S> {
  private replicas: Replica[];
  private readonly shared: Float32Array | undefined;
  private nextId = 0;
  /** `policy.step` when the replicas last matched the main policy. */
  private syncedStep: number;
  private closed = false;

  private constructor(
    readonly policy: TransformerPolicy,
    private readonly options: DataParallelOptions<I, S>,
    replicas: Replica[],
    shared: Float32Array | undefined,
  ) {
    this.replicas = replicas;
    this.shared = shared;
    this.syncedStep = policy.step;
  }

  /** Starts the replica threads (each with a copy of the weights and Adam state) and waits until they are ready. */
  static async start<I, S>(
    policy: TransformerPolicy,
    options: DataParallelOptions<I, S>,
  ): Promise<DataParallelTrainer<I, S>> {
    const { threads } = options;
    if (!Number.isInteger(threads) || threads < 1)
      throw new DataParallelError(`threads: ${threads} is not allowed (must be an integer ≥ 1)`);
    if (threads === 1) return new DataParallelTrainer(policy, options, [], undefined);
    const missing = missingNodeFlags();
    if (missing.length > 0)
      options.log?.warn(
        { missing },
        `data-parallel training runs slower without node ${missing.join(" ")} (garbage collection on helper threads takes time from the training threads); start node with them`,
      );
    const backend = backendInfo()?.name;
    if (backend !== "wasm" && backend !== "cpu" && backend !== "tensorflow")
      throw new DataParallelError(
        `data-parallel replicas start this thread's TF.js backend, but it is ${backend ?? "not initialised"} (allowed: wasm, cpu, tensorflow)`,
      );
    const { total } = gradientLayout(policy);
    const buffer = new SharedArrayBuffer(threads * total * Float32Array.BYTES_PER_ELEMENT);
    const replicas: Replica[] = [];
    for (let slot = 1; slot < threads; slot++) {
      const replica = new Replica(new Worker(WORKER_ENTRY, { execArgv: [] }), slot);
      replicas.push(replica);
      const weights = replicaWeights(policy);
      const reference = options.reference && [...options.reference.values().values()];
      replica.send(
        {
          type: "init",
          backend,
          config: policy.config,
          names: [...policy.params.keys()],
          version: policy.version,
          optimizer: { ...policy.optimizer },
          grads: buffer,
          slot,
          threads,
          lossUrl: options.loss.url,
          ...weights,
          ...(reference ? { reference } : {}),
        },
        [...transferOf(weights), ...(reference ?? []).map((v) => v.buffer as ArrayBuffer)],
      );
    }
    const trainer = new DataParallelTrainer(policy, options, replicas, new Float32Array(buffer));
    try {
      await Promise.all(replicas.map((r) => r.whenReady()));
    } catch (error) {
      await trainer.close();
      throw error;
    }
    // Between steps an idle replica must not keep the process alive.
    for (const r of replicas) r.worker.unref();
    return trainer;
  }

  /** Threads that will compute the next step. */
  get threads(): number {
    return this.replicas.length + 1;
  }

  /**
   * One optimizer step of `policy` over `sequences` with the module's loss built from `input`.
   * With one thread this is `policy.trainStep`; otherwise each thread computes its shard and
   * every thread applies the summed gradient.
   */
  async trainStep(sequences: readonly Int32Array[], temperature: number, input: I): Promise<ParallelStepResult<S>> {
    if (this.closed) throw new DataParallelError("trainStep after close()");
    this.dropLostReplicas();
    const module = this.options.loss;
    if (this.replicas.length === 0) {
      const shard = module.build(input);
      const result = this.policy.trainStep(sequences, temperature, shard.loss);
      this.syncedStep = this.policy.step;
      return { ...result, stats: shard.stats(), threads: 1 };
    }
    // Refused here as one thread would refuse them: an empty shard alone is fine, an empty batch is not.
    if (sequences.length === 0) throw new ModelInputError("trainStep: sequences is empty");
    for (const [i, s] of sequences.entries()) this.policy.validateTokens(s, `sequences[${i}]`, 2);
    if (this.policy.step !== this.syncedStep) this.resync();
    const shared = this.shared as Float32Array;
    const { total } = gradientLayout(this.policy);
    const threads = this.threads;
    const shards = shardRows(
      sequences.map((s) => rowCost(this.policy.config, s.length)),
      threads,
    );
    const id = this.nextId++;
    const optimizer = { ...this.policy.optimizer };
    for (const r of this.replicas) r.worker.ref();
    try {
      const replies = this.replicas.map((r) => {
        const rows = shards[r.slot] as number[];
        r.send({
          type: "step",
          id,
          temperature,
          rows,
          sequences: rows.map((i) => sequences[i] as Int32Array),
          input,
          optimizer,
        });
        return r.reply(id, ["grads", "failed"]);
      });
      // This thread's shard, while the replicas compute theirs.
      const rows = shards[0] as number[];
      let local: { loss: number; stats: S } | undefined;
      let localError: unknown;
      const started = performance.now();
      try {
        local = computeShard(
          this.policy,
          module.build(input),
          rows.map((i) => sequences[i] as Int32Array),
          rows,
          temperature,
          shared.subarray(0, total),
        );
      } catch (error) {
        localError = error;
      }
      const shardDone = performance.now();
      let remote: FromReplica[];
      try {
        remote = await Promise.all(replies);
      } catch (error) {
        // A lost replica: the others are told to leave their weights alone.
        for (const r of this.replicas) r.send({ type: "skip", id });
        throw new DataParallelError(
          `${(error as Error).message} during a training step: the step was not applied (weights unchanged); later steps run on this thread alone`,
          { cause: error },
        );
      }
      const failed = remote.find((m) => m.type === "failed");
      if (localError !== undefined || failed) {
        for (const r of this.replicas) r.send({ type: "skip", id });
        if (localError !== undefined) throw localError;
        throw new DataParallelError(
          `data-parallel shard failed in a replica: ${failed?.type === "failed" ? failed.message : ""}`,
        );
      }
      const waited = performance.now();
      for (const r of this.replicas) r.send({ type: "apply", id });
      const applied = this.replicas.map((r) => r.reply(id, ["applied", "applyFailed"]));
      let gradNorm: number;
      try {
        gradNorm = this.policy.applyGradients(sumSlots(this.policy, shared, threads));
      } catch (error) {
        // Every replica holds the same sums and refuses the same step; wait for them so the next step starts clean.
        const settled = await Promise.allSettled(applied);
        settled.forEach((outcome, k) => {
          const replica = this.replicas[k] as Replica;
          if (outcome.status === "fulfilled" && outcome.value.type === "applied") {
            replica.lost = `data-parallel replica ${replica.slot} diverged: it applied a step this thread refused`;
            void replica.worker.terminate();
          }
        });
        throw error;
      }
      this.syncedStep = this.policy.step;
      const timings = {
        shardMs: shardDone - started,
        replicaShardMs: Math.max(...remote.map((m) => (m.type === "grads" ? m.ms : 0))),
        waitMs: waited - shardDone,
        applyMs: performance.now() - waited,
      };
      const settled = await Promise.allSettled(applied);
      settled.forEach((outcome, k) => {
        const replica = this.replicas[k] as Replica;
        if (outcome.status === "rejected") return; // lost after this thread applied: the step stands
        const message = outcome.value;
        if (message.type === "applied" && Object.is(message.gradNorm, gradNorm)) return;
        // A replica that took another step (or none) no longer matches: stop using it.
        replica.lost = `data-parallel replica ${replica.slot} diverged: ${message.type === "applyFailed" ? message.message : `gradient norm ${message.type === "applied" ? message.gradNorm : "?"} here ${gradNorm}`}`;
        void replica.worker.terminate();
      });
      let stats = (local as { loss: number; stats: S }).stats;
      let loss = (local as { loss: number; stats: S }).loss;
      for (const message of remote)
        if (message.type === "grads") {
          stats = module.merge(stats, message.stats as S);
          loss += message.loss;
        }
      return { loss, gradNorm, stats, threads, timings };
    } finally {
      for (const r of this.replicas) r.worker.unref();
    }
  }

  /**
   * Per-token log-probs (as TrainablePolicy.logProbs) under the trained weights or the frozen
   * reference given to start(), the rows split over the threads like a step's.
   */
  async logProbs(
    sequences: readonly Int32Array[],
    temperature: number,
    which: "policy" | "reference",
  ): Promise<Float32Array[]> {
    if (this.closed) throw new DataParallelError("logProbs after close()");
    this.dropLostReplicas();
    const local = which === "policy" ? this.policy : this.options.reference;
    if (!local) throw new DataParallelError('logProbs(…, "reference") needs the reference given to start()');
    if (this.replicas.length === 0 || sequences.length < 2) return local.logProbs(sequences, temperature);
    if (which === "policy" && this.policy.step !== this.syncedStep) this.resync();
    const shards = shardRows(
      sequences.map((s) => rowCost(this.policy.config, s.length)),
      this.threads,
    );
    const id = this.nextId++;
    for (const r of this.replicas) r.worker.ref();
    try {
      const replies = this.replicas.map((r) => {
        const rows = shards[r.slot] as number[];
        r.send({ type: "logProbs", id, which, temperature, sequences: rows.map((i) => sequences[i] as Int32Array) });
        return r.reply(id, ["logProbs", "failed"]);
      });
      const out: Float32Array[] = new Array(sequences.length);
      const mine = shards[0] as number[];
      let localError: unknown;
      try {
        const values =
          mine.length > 0
            ? local.logProbs(
                mine.map((i) => sequences[i] as Int32Array),
                temperature,
              )
            : [];
        mine.forEach((row, k) => {
          out[row] = values[k] as Float32Array;
        });
      } catch (error) {
        localError = error;
      }
      let remote: FromReplica[];
      try {
        remote = await Promise.all(replies);
      } catch (error) {
        throw new DataParallelError(`${(error as Error).message} while computing log-probs`, { cause: error });
      }
      if (localError !== undefined) throw localError;
      remote.forEach((message, k) => {
        if (message.type === "failed")
          throw new DataParallelError(`data-parallel log-probs failed in a replica: ${message.message}`);
        const rows = shards[(this.replicas[k] as Replica).slot] as number[];
        if (message.type === "logProbs")
          rows.forEach((row, j) => {
            out[row] = message.values[j] as Float32Array;
          });
      });
      return out;
    } finally {
      for (const r of this.replicas) r.worker.unref();
    }
  }

  /** Each replica's current weights (checkpoint order) and step: to check they equal the main policy's. */
  async replicaValues(): Promise<Array<{ values: Map<string, Float32Array>; step: number }>> {
    const names = [...this.policy.params.keys()];
    const id = this.nextId++;
    for (const r of this.replicas) r.worker.ref();
    try {
      const replies = await Promise.all(
        this.replicas.map((r) => {
          r.send({ type: "values", id });
          return r.reply(id, ["values"]);
        }),
      );
      return replies.map((m) => {
        const values = m.type === "values" ? m.values : [];
        return {
          values: new Map(names.map((n, i) => [n, values[i] as Float32Array])),
          step: m.type === "values" ? m.step : -1,
        };
      });
    } finally {
      for (const r of this.replicas) r.worker.unref();
    }
  }

  /** Kills replica threads as a crash would (tests of the failure path). */
  async killReplicas(): Promise<void> {
    await Promise.all(this.replicas.map((r) => r.worker.terminate()));
  }

  /** Copies the main policy's weights and Adam state to every replica (after it was changed outside trainStep). */
  resync(): void {
    for (const r of this.replicas) {
      const weights = replicaWeights(this.policy);
      r.send({ type: "load", ...weights }, transferOf(weights));
    }
    this.syncedStep = this.policy.step;
  }

  /** Stops the replica threads (a hung one is terminated after 10 s). The main policy is left to its owner. */
  async close(): Promise<void> {
    this.closed = true;
    const replicas = this.replicas;
    this.replicas = [];
    await Promise.all(replicas.map((r) => stopReplica(r)));
  }

  /** After a replica is lost, every later step runs on this thread alone (the slots are fixed per thread count). */
  private dropLostReplicas(): void {
    const lost = this.replicas.find((r) => r.lost);
    if (!lost) return;
    this.options.log?.warn({ reason: lost.lost }, "data-parallel replica lost; later steps run on this thread alone");
    for (const r of this.replicas) void stopReplica(r);
    this.replicas = [];
  }
}

async function stopReplica(replica: Replica): Promise<void> {
  if (replica.lost) void replica.worker.terminate();
  else replica.send({ type: "stop" });
  const timeout = setTimeout(() => void replica.worker.terminate(), 10_000);
  await replica.exited;
  clearTimeout(timeout);
}

/**
 * The replica's entry: under tsx, dataParallelWorker.mjs registers the loader in the thread, then
 * loads the .ts; the CLI bundle points this at its own entry for it (bin/cliBundle.mjs).
 */
const WORKER_ENTRY = new URL("./dataParallelWorker.mjs", import.meta.url);
