import { setImmediate as yieldToEventLoop } from "node:timers/promises";
import { AgentRlError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import type { Decoder, DrawnToken, InferencePolicy, TokenDraw } from "../../shared/model/types.ts";
import { seededRandom } from "../../shared/rl/random.ts";

/** One sequence to generate. */
export interface GenerationJob {
  readonly prompt: readonly number[];
  /** Most new tokens (already clamped to the context window by the caller or here). */
  readonly maxTokens: number;
  readonly temperature: number;
  readonly topP: number;
  readonly seed: number;
  /** Aborts the job (client went away): its slot is freed before the next step. */
  readonly signal?: AbortSignal;
}

export interface GenerationResult {
  /** Generated ids, including the stop token when finishReason is `stop`. */
  readonly tokens: number[];
  /** log_softmax(logits / temperature)[token] of each generated token (full vocabulary). */
  readonly logprobs: number[];
  /** Log-prob of each token under the distribution it was sampled from (nucleus renormalized; 0 when greedy). */
  readonly sampledLogprobs: number[];
  /** Policy version whose weights produced each token's distribution. */
  readonly versions: number[];
  readonly finishReason: "stop" | "length";
}

/** Counters that make batching observable (GET /stats). */
export interface SchedulerStats {
  /** Batched decode steps run (one per generated token of the busiest sequence). */
  decodeSteps: number;
  /** Prompts prefilled (sequences admitted). */
  prefills: number;
  generatedTokens: number;
  /** Largest number of sequences that shared one decode step. */
  maxBatch: number;
  /** Sum over steps of the sequences in each step (mean batch = this / decodeSteps). */
  batchedSequenceSteps: number;
  active: number;
  queued: number;
  policyVersion: number;
  policySwitches: number;
  completed: number;
  failed: number;
  /** Prompts that continued a finished sequence exactly and reused its KV cache, and the tokens not recomputed. */
  prefixCacheHits: number;
  prefixCacheReusedTokens: number;
  /** Prompt tokens prefilled (computed). */
  prefilledTokens: number;
}

/**
 * What the HTTP app needs from a decode loop. Two implementations: BatchScheduler (the loop in this
 * thread) and ThreadedScheduler (the same loop in a worker thread, so HTTP is answered while a
 * step runs); tests and benches may use either.
 */
export interface Generator {
  /** Version of the weights the next step will use. */
  readonly policyVersion: number;
  /** Queues a sequence; resolves when it stops (stop token, max tokens or context end). */
  generate(job: GenerationJob): Promise<GenerationResult>;
  /**
   * Switches to `policy` before the next decode step; resolves with the version it replaced (-1
   * when a later switch superseded this one). The caller keeps `policy` alive until it is replaced.
   */
  switchPolicy(policy: InferencePolicy): Promise<number>;
  /** Counters; cheap (no work on the decode loop). */
  stats(): SchedulerStats;
  /** Stops the loop; queued and running sequences are rejected. */
  stop(): Promise<void>;
}

export class GenerationError extends AgentRlError {
  override readonly name = "GenerationError";
}

interface Pending {
  readonly job: GenerationJob;
  resolve(result: GenerationResult): void;
  reject(error: Error): void;
}

interface Running extends Pending {
  readonly slot: number;
  /** The job's seeded uniform stream: one number per non-greedy draw. */
  readonly random: () => number;
  readonly tokens: number[];
  readonly logprobs: number[];
  readonly sampledLogprobs: number[];
  readonly versions: number[];
}

/**
 * Continuous batching over a slot Decoder. One loop, one decode step at a time:
 *   1. switch weights if a new policy is pending (between steps; the decoder recomputes the
 *      in-flight sequences' KV caches with the new weights, so each token's recorded version and
 *      log-prob are exactly those of the weights that produced it),
 *   2. drop aborted sequences, admit queued ones into free slots (prefill, first token sampled),
 *   3. one batched step for all active sequences, each sampled with its own temperature, top_p
 *      and seeded RNG, and retire the finished ones,
 *   4. yield to the event loop (TF.js on wasm runs synchronously; this is where HTTP is served).
 */
export class BatchScheduler implements Generator {
  private readonly queue: Pending[] = [];
  private readonly running = new Map<number, Running>();
  private pendingPolicy:
    | { policy: InferencePolicy; done: (previous: number) => void; fail: (error: Error) => void }
    | undefined;
  private wake: (() => void) | undefined;
  private stopped = false;
  private readonly loop: Promise<void>;
  private readonly counters = {
    decodeSteps: 0,
    prefills: 0,
    generatedTokens: 0,
    maxBatch: 0,
    batchedSequenceSteps: 0,
    policySwitches: 0,
    completed: 0,
    failed: 0,
  };

  constructor(
    private readonly decoder: Decoder,
    private readonly options: {
      readonly stopTokenIds: readonly number[];
      readonly contextLength: number;
      readonly log?: Logger;
    },
  ) {
    this.loop = this.run();
  }

  get policyVersion(): number {
    return this.decoder.policyVersion;
  }

  stats(): SchedulerStats {
    return {
      ...this.counters,
      active: this.running.size,
      queued: this.queue.length,
      policyVersion: this.decoder.policyVersion,
      prefixCacheHits: this.decoder.prefixStats?.hits ?? 0,
      prefixCacheReusedTokens: this.decoder.prefixStats?.reusedTokens ?? 0,
      prefilledTokens: this.decoder.prefixStats?.prefilledTokens ?? 0,
    };
  }

  /** Queues a sequence; resolves when it stops (stop token, max tokens or context end). */
  generate(job: GenerationJob): Promise<GenerationResult> {
    if (this.stopped) return Promise.reject(new GenerationError("the scheduler is stopped"));
    if (job.prompt.length === 0) return Promise.reject(new GenerationError("empty prompt"));
    if (job.prompt.length >= this.options.contextLength)
      return Promise.reject(
        new GenerationError(
          `prompt of ${job.prompt.length} tokens leaves no room in the context window of ${this.options.contextLength}`,
        ),
      );
    return new Promise((resolve, reject) => {
      this.queue.push({ job, resolve, reject });
      this.wake?.();
    });
  }

  /**
   * Switches to `policy` before the next decode step; resolves with the version it replaced once
   * the switch happened (the caller may then dispose the old policy).
   */
  switchPolicy(policy: InferencePolicy): Promise<number> {
    if (this.stopped) return Promise.reject(new GenerationError("the scheduler is stopped"));
    return new Promise((resolve, reject) => {
      this.pendingPolicy?.done(-1);
      this.pendingPolicy = { policy, done: resolve, fail: reject };
      this.wake?.();
    });
  }

  /** Stops the loop; queued and running sequences are rejected. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.wake?.();
    await this.loop;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      try {
        this.applyPendingPolicy();
        this.dropAborted();
        this.admit();
        if (this.running.size > 0) this.step();
      } catch (error) {
        // A failed step must not kill the server: fail the sequences involved and go on.
        this.options.log?.error({ err: error }, "decode step failed");
        this.failAll(new GenerationError(`decode step failed: ${(error as Error).message}`, { cause: error }));
      }
      if (this.running.size > 0 || (this.queue.length > 0 && this.decoder.active < this.decoder.capacity)) {
        await yieldToEventLoop();
      } else if (!this.stopped) {
        await new Promise<void>((resolve) => {
          this.wake = resolve;
          if (this.pendingPolicy || this.queue.some((p) => p.job.signal?.aborted)) resolve();
        });
        this.wake = undefined;
      }
    }
    const stopped = new GenerationError("the policy server is shutting down");
    this.failAll(stopped);
    for (const pending of this.queue.splice(0)) pending.reject(stopped);
    this.pendingPolicy?.fail(stopped);
    this.pendingPolicy = undefined;
  }

  private applyPendingPolicy(): void {
    const pending = this.pendingPolicy;
    if (!pending) return;
    this.pendingPolicy = undefined;
    const previous = this.decoder.policyVersion;
    try {
      this.decoder.setPolicy(pending.policy);
    } catch (error) {
      // The caller learns why (instead of waiting forever); the loop fails the running sequences.
      pending.fail(error as Error);
      throw error;
    }
    this.counters.policySwitches += 1;
    this.options.log?.info({ from: previous, to: pending.policy.version }, "policy switched between decode steps");
    pending.done(previous);
  }

  private dropAborted(): void {
    for (let i = this.queue.length - 1; i >= 0; i--) {
      const pending = this.queue[i] as Pending;
      if (pending.job.signal?.aborted) {
        this.queue.splice(i, 1);
        pending.reject(new GenerationError("request aborted"));
      }
    }
    for (const running of [...this.running.values()]) {
      if (running.job.signal?.aborted) this.retire(running, new GenerationError("request aborted"));
    }
  }

  private admit(): void {
    while (this.queue.length > 0 && this.decoder.active < this.decoder.capacity) {
      const pending = this.queue.shift() as Pending;
      const random = seededRandom(pending.job.seed);
      let added: { slot: number; drawn: DrawnToken };
      try {
        added = this.decoder.addAndDraw(pending.job.prompt, nextDraw(pending.job, random));
      } catch (error) {
        this.counters.failed += 1;
        pending.reject(error as Error);
        continue;
      }
      this.counters.prefills += 1;
      const running: Running = {
        ...pending,
        slot: added.slot,
        random,
        tokens: [],
        logprobs: [],
        sampledLogprobs: [],
        versions: [],
      };
      this.running.set(added.slot, running);
      this.accept(running, added.drawn);
    }
  }

  private step(): void {
    const batch = [...this.running.values()];
    const slots = batch.map((r) => r.slot);
    const tokens = batch.map((r) => r.tokens[r.tokens.length - 1] as number);
    const drawn = this.decoder.stepAndDraw(
      slots,
      tokens,
      batch.map((r) => nextDraw(r.job, r.random)),
    );
    this.counters.decodeSteps += 1;
    this.counters.batchedSequenceSteps += batch.length;
    this.counters.maxBatch = Math.max(this.counters.maxBatch, batch.length);
    batch.forEach((running, i) => {
      this.accept(running, drawn[i] as DrawnToken);
    });
  }

  /** Appends the token drawn for `running`, then retires it if it is done. */
  private accept(running: Running, sampled: DrawnToken): void {
    const { job } = running;
    running.tokens.push(sampled.token);
    running.logprobs.push(sampled.logprob);
    running.sampledLogprobs.push(sampled.sampledLogprob);
    running.versions.push(this.decoder.policyVersion);
    this.counters.generatedTokens += 1;
    if (this.options.stopTokenIds.includes(sampled.token)) {
      this.retire(running, "stop");
      return;
    }
    // The last sampled token is never fed back, so the cache holds prompt + tokens - 1 positions.
    const room = this.options.contextLength - job.prompt.length;
    if (running.tokens.length >= Math.min(job.maxTokens, room)) this.retire(running, "length");
  }

  private retire(running: Running, outcome: "stop" | "length" | Error): void {
    this.running.delete(running.slot);
    this.decoder.remove(running.slot);
    if (outcome instanceof Error) {
      this.counters.failed += 1;
      running.reject(outcome);
      return;
    }
    this.counters.completed += 1;
    running.resolve({
      tokens: running.tokens,
      logprobs: running.logprobs,
      sampledLogprobs: running.sampledLogprobs,
      versions: running.versions,
      finishReason: outcome,
    });
  }

  private failAll(error: Error): void {
    for (const running of [...this.running.values()]) {
      try {
        this.retire(running, error);
      } catch {
        this.running.delete(running.slot);
      }
    }
  }
}

/** The job's next draw: a uniform number from its stream unless greedy (greedy draws none). */
function nextDraw(job: GenerationJob, random: () => number): TokenDraw {
  return { temperature: job.temperature, topP: job.topP, uniform: job.temperature > 0 ? random() : 0 };
}
