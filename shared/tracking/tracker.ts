import { AgentRlError } from "../errors.ts";
import { sleep as defaultSleep } from "../sleep.ts";

/**
 * One mechanism for every tracker (TensorBoard, MLflow, W&B): the trainer hands records to a
 * `Tracker`, which queues them (bounded) and a background pump writes them to a `TrackerSink`
 * with retries and exponential backoff. A record that cannot be written is dropped and counted;
 * the first failure of a sink is warned about once. Nothing here ever throws into, or waits in,
 * a training step: metrics.jsonl stays the source of truth.
 */

/** What a tracker records. `wallTime` in ms since the epoch. */
export type TrackerRecord =
  | {
      readonly kind: "params";
      readonly params: Readonly<Record<string, string>>;
      readonly tags: Readonly<Record<string, string>>;
    }
  | {
      readonly kind: "scalars";
      readonly step: number;
      readonly wallTime: number;
      readonly values: Readonly<Record<string, number>>;
    }
  | {
      readonly kind: "histogram";
      readonly step: number;
      readonly wallTime: number;
      readonly tag: string;
      readonly values: readonly number[];
    }
  | {
      readonly kind: "text";
      readonly step: number;
      readonly wallTime: number;
      readonly tag: string;
      readonly markdown: string;
    };

/** How a run ended, as MLflow names it. */
export type RunStatus = "FINISHED" | "FAILED";

/** A destination. `write` writes the whole batch or throws; a sink ignores kinds it has no place for. */
export interface TrackerSink {
  /** `tensorboard`, `mlflow`, `wandb`: in warnings and in the links file. */
  readonly name: string;
  write(records: readonly TrackerRecord[]): Promise<void>;
  /** Marks the run ended (MLflow's run status); after it nothing is written. */
  finish(status: RunStatus): Promise<void>;
  /** Where a person sees the run (MLflow's run page), once the run exists. */
  link?(): string | undefined;
}

/** A failure that retrying cannot fix (HTTP 4xx other than 408/429): the batch is dropped at once. */
export class TrackerRejectedError extends AgentRlError {
  override readonly name = "TrackerRejectedError";
}

/** The error for a tracker's failed HTTP answer: 4xx is the request's fault and will fail again;
 * 408, 429 and 5xx may pass later, so they stay retryable. */
export function httpFailure(status: number, message: string): Error {
  return status >= 400 && status < 500 && status !== 408 && status !== 429
    ? new TrackerRejectedError(message)
    : new Error(message);
}

/** A body that may not be JSON (a proxy's HTML error page): its value, or undefined. */
export function jsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** What the trainer talks to: never blocks, never throws. */
export interface Tracker {
  /** The run's configuration (flattened) and tags (git commit); once, before the first step. */
  params(params: Readonly<Record<string, string>>, tags?: Readonly<Record<string, string>>): void;
  scalars(step: number, values: Readonly<Record<string, number>>): void;
  histogram(step: number, tag: string, values: readonly number[]): void;
  text(step: number, tag: string, markdown: string): void;
  /** Records not written (queue full, retries spent, rejected), over all sinks. */
  readonly dropped: number;
  /** Links to the run in each sink that has one (`{ mlflow: "http://…/#/experiments/1/runs/ab12" }`). */
  links(): Record<string, string>;
  /** Writes what is queued (at most `finishSeconds`), then ends the run with `status`. */
  finish(status: RunStatus): Promise<void>;
}

export interface QueueOptions {
  /** Records waiting at most; a record beyond it is dropped (the oldest, params, are kept). */
  readonly queueLimit: number;
  /** Retries of a failed batch before it is dropped. */
  readonly retries: number;
  /** First backoff; each retry doubles it. */
  readonly retryBaseSeconds: number;
  /** How long `finish` waits for the queue to drain. */
  readonly finishSeconds: number;
  /** Records per `write` call. */
  readonly batchLimit?: number;
  /** The one warning per sink (a JSON line on stdout in the trainer). */
  readonly warn: (message: string) => void;
  readonly now?: () => number;
  readonly sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/**
 * One sink behind a bounded queue.
 * @example const tb = new QueuedTracker(new TensorBoardSink(dir), { queueLimit: 1000, retries: 4, retryBaseSeconds: 0.5, finishSeconds: 30, warn });
 */
export class QueuedTracker implements Tracker {
  private readonly queue: TrackerRecord[] = [];
  private pumping: Promise<void> | undefined;
  private warned = false;
  private finished = false;
  /** Set when finish gave up waiting: late outcomes of writes in flight are not counted twice. */
  private closed = false;
  private inFlight = 0;
  private readonly stop = new AbortController();
  dropped = 0;

  constructor(
    private readonly sink: TrackerSink,
    private readonly options: QueueOptions,
  ) {}

  private get now(): number {
    return (this.options.now ?? Date.now)();
  }

  params(params: Readonly<Record<string, string>>, tags: Readonly<Record<string, string>> = {}): void {
    this.push({ kind: "params", params, tags });
  }

  scalars(step: number, values: Readonly<Record<string, number>>): void {
    this.push({ kind: "scalars", step, wallTime: this.now, values });
  }

  histogram(step: number, tag: string, values: readonly number[]): void {
    this.push({ kind: "histogram", step, wallTime: this.now, tag, values: [...values] });
  }

  text(step: number, tag: string, markdown: string): void {
    this.push({ kind: "text", step, wallTime: this.now, tag, markdown });
  }

  links(): Record<string, string> {
    const link = this.sink.link?.();
    return link ? { [this.sink.name]: link } : {};
  }

  private push(record: TrackerRecord): void {
    if (this.finished || this.queue.length >= this.options.queueLimit) {
      this.drop(
        1,
        new Error(this.finished ? "the run was finished" : `queue full (${this.options.queueLimit} records)`),
      );
      return;
    }
    this.queue.push(record);
    this.kick();
  }

  private kick(): void {
    if (this.pumping) return;
    this.pumping = this.pump().finally(() => {
      this.pumping = undefined;
      // a record pushed after the loop's last check but before this line
      if (this.queue.length > 0 && !this.stop.signal.aborted) this.kick();
    });
  }

  private async drained(): Promise<void> {
    while (this.pumping) await this.pumping;
  }

  private async pump(): Promise<void> {
    await null; // records pushed in the same tick (a step's scalars and histograms) go out as one batch
    while (this.queue.length > 0 && !this.stop.signal.aborted) {
      const batch = this.queue.splice(0, this.options.batchLimit ?? 100);
      this.inFlight = batch.length;
      const outcome = await this.attempt(batch.length, () => this.sink.write(batch), batch.length > 1);
      // one bad record (a changed MLflow param) must not cost the others: write them one by one
      if (outcome === "rejected") for (const record of batch) await this.attempt(1, () => this.sink.write([record]));
      this.inFlight = 0;
    }
  }

  /**
   * Runs `write` with retries; on giving up counts `records` dropped. With `splittable`, a
   * rejection is handed back ("rejected") uncounted, for the caller to try record by record.
   */
  private async attempt(
    records: number,
    write: () => Promise<void>,
    splittable = false,
  ): Promise<"written" | "rejected" | "dropped"> {
    const sleep = this.options.sleep ?? defaultSleep;
    for (let attempt = 0; ; attempt += 1) {
      try {
        await write();
        return "written";
      } catch (error) {
        const rejected = error instanceof TrackerRejectedError;
        if (rejected && splittable) return "rejected";
        if (rejected || attempt >= this.options.retries || this.stop.signal.aborted) {
          this.drop(records, error);
          return "dropped";
        }
        await sleep(this.options.retryBaseSeconds * 1000 * 2 ** attempt, this.stop.signal);
      }
    }
  }

  private drop(records: number, error: unknown): void {
    if (this.closed) return; // counted already when finish gave up on them
    this.dropped += records;
    if (this.warned) return;
    this.warned = true;
    const reason = error instanceof Error ? error.message : String(error);
    this.options.warn(
      `${this.sink.name}: records dropped from now on when they cannot be written (counted as tracking/dropped in metrics.jsonl; training goes on): ${reason}`,
    );
  }

  async finish(status: RunStatus): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    // a real timer, not the injected sleep: that one paces retries only
    const deadline = new AbortController();
    await Promise.race([this.drained(), defaultSleep(this.options.finishSeconds * 1000, deadline.signal)]);
    deadline.abort();
    if (this.pumping) {
      // out of time: stop retrying and count what is queued or in flight; a write that never
      // answers is not waited for
      this.stop.abort();
      this.drop(this.queue.splice(0).length + this.inFlight, new Error("the run ended before they were written"));
      this.closed = true;
    }
    await this.attempt(1, () => this.sink.finish(status));
  }
}

/** Every configured tracker at once: what the trainer holds. */
export class FanOutTracker implements Tracker {
  constructor(private readonly trackers: readonly Tracker[]) {}

  params(params: Readonly<Record<string, string>>, tags?: Readonly<Record<string, string>>): void {
    for (const t of this.trackers) t.params(params, tags);
  }

  scalars(step: number, values: Readonly<Record<string, number>>): void {
    for (const t of this.trackers) t.scalars(step, values);
  }

  histogram(step: number, tag: string, values: readonly number[]): void {
    for (const t of this.trackers) t.histogram(step, tag, values);
  }

  text(step: number, tag: string, markdown: string): void {
    for (const t of this.trackers) t.text(step, tag, markdown);
  }

  get dropped(): number {
    return this.trackers.reduce((sum, t) => sum + t.dropped, 0);
  }

  links(): Record<string, string> {
    return Object.assign({}, ...this.trackers.map((t) => t.links()));
  }

  async finish(status: RunStatus): Promise<void> {
    await Promise.all(this.trackers.map((t) => t.finish(status)));
  }
}
