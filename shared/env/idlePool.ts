/**
 * Warm resources handed back after use (an env worker's shell or SQL threads), kept for the next
 * episode instead of being started again. Starting a thread costs a few hundred milliseconds of
 * CPU, so the pool keeps as many as the worker's sessions last needed at once: a cap that is
 * smaller than the session concurrency makes every round of episodes start most of its threads
 * anew. What stays unused for `idleMs` is discarded, so memory follows the load back down.
 */

export interface IdlePoolOptions<T> {
  /** Items kept at most; beyond it a returned item is discarded. */
  readonly maxIdle: number;
  /** An item unused this long is discarded. */
  readonly idleMs: number;
  /** False for an item that can no longer be used (its thread died): never kept or handed out. */
  readonly isAlive: (item: T) => boolean;
  /** Frees an item the pool will not keep. */
  readonly discard: (item: T) => void;
}

/** Keep up to this many threads per pool unless told otherwise: above any session concurrency we ship. */
export const DEFAULT_MAX_IDLE = 64;
/** Discard a thread unused for a minute. */
export const DEFAULT_IDLE_MS = 60_000;

export class IdlePool<T> {
  /** Oldest first; `take` hands out the newest, so the least used age out. */
  private readonly idle: { item: T; since: number }[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: IdlePoolOptions<T>) {
    if (!Number.isInteger(options.maxIdle) || options.maxIdle < 0)
      throw new RangeError(`maxIdle must be a whole number ≥ 0, got ${options.maxIdle}`);
    if (!(options.idleMs > 0)) throw new RangeError(`idleMs must be > 0, got ${options.idleMs}`);
  }

  /** Items kept now. */
  get size(): number {
    return this.idle.length;
  }

  /** The most recently returned live item, or undefined: the caller then starts a new one. */
  take(): T | undefined {
    for (let entry = this.idle.pop(); entry; entry = this.idle.pop()) {
      if (this.options.isAlive(entry.item)) return entry.item;
      this.options.discard(entry.item);
    }
    return undefined;
  }

  /** Hands an item back: kept while alive and room is left, discarded otherwise. */
  put(item: T): void {
    if (!this.options.isAlive(item) || this.idle.length >= this.options.maxIdle) {
      this.options.discard(item);
      return;
    }
    this.idle.push({ item, since: Date.now() });
    this.schedule();
  }

  /** Discards every kept item (shutdown, tests). */
  drain(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const { item } of this.idle.splice(0)) this.options.discard(item);
  }

  private schedule(): void {
    const oldest = this.idle[0];
    if (this.timer || !oldest) return;
    const due = Math.max(0, oldest.since + this.options.idleMs - Date.now());
    this.timer = setTimeout(() => this.reap(), due);
    // An idle pool must not keep its process alive.
    this.timer.unref();
  }

  private reap(): void {
    this.timer = undefined;
    const cutoff = Date.now() - this.options.idleMs;
    let expired = 0;
    while (expired < this.idle.length && (this.idle[expired] as { since: number }).since <= cutoff) expired += 1;
    for (const { item } of this.idle.splice(0, expired)) this.options.discard(item);
    this.schedule();
  }
}
