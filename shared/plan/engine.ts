/**
 * A small discrete-event engine: a clock, a time-ordered event heap (ties broken by insertion
 * order, so a run is deterministic), and multi-server FIFO stations that keep their own busy time
 * for utilisation. `agentrl plan` builds the pipeline out of these (shared/plan/pipeline.ts).
 */

interface Scheduled {
  readonly time: number;
  readonly seq: number;
  readonly run: () => void;
}

/** Binary min-heap on (time, seq). */
class EventHeap {
  private readonly items: Scheduled[] = [];

  get size(): number {
    return this.items.length;
  }

  push(item: Scheduled): void {
    const a = this.items;
    // sift up, moving parents down instead of swapping (no temporary arrays on the hot path)
    let i = a.length;
    a.push(item);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = a[parent] as Scheduled;
      if (!before(item, p)) break;
      a[i] = p;
      i = parent;
    }
    a[i] = item;
  }

  pop(): Scheduled | undefined {
    const a = this.items;
    const top = a[0];
    const last = a.pop();
    if (a.length === 0 || last === undefined) return top;
    // sift the last item down from the root
    const n = a.length;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const child = r < n && before(a[r] as Scheduled, a[l] as Scheduled) ? r : l;
      const c = a[child] as Scheduled;
      if (!before(c, last)) break;
      a[i] = c;
      i = child;
    }
    a[i] = last;
    return top;
  }
}

function before(x: Scheduled, y: Scheduled): boolean {
  return x.time < y.time || (x.time === y.time && x.seq < y.seq);
}

/** A FIFO queue with O(1) push and shift (Array.shift is O(n) on long arrays). */
export class Fifo<T> {
  private items: T[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head++];
    // compact now and then so the consumed front does not grow without bound
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}

/**
 * The clock and the event list.
 * @example
 * const sim = new Simulation();
 * sim.after(2, () => console.log(sim.now)); // 2
 * sim.run(10);
 */
export class Simulation {
  private readonly heap = new EventHeap();
  private seq = 0;
  /** Simulated seconds. */
  now = 0;
  /** Events run so far. */
  events = 0;
  private stopped = false;

  /** Runs `fn` `delay` seconds from now (delay >= 0). */
  after(delay: number, fn: () => void): void {
    if (!(delay >= 0)) throw new RangeError(`delay must be a number >= 0, got ${delay}`);
    this.heap.push({ time: this.now + delay, seq: this.seq++, run: fn });
  }

  /** Ends `run` after the event in progress. */
  stop(): void {
    this.stopped = true;
  }

  /** Runs events until the list is empty, `stop()` is called, time passes `until`, or `maxEvents` ran. */
  run(until = Number.POSITIVE_INFINITY, maxEvents = Number.POSITIVE_INFINITY): void {
    this.stopped = false;
    while (!this.stopped && this.heap.size > 0 && this.events < maxEvents) {
      const next = this.heap.pop() as Scheduled;
      if (next.time > until) {
        this.heap.push(next);
        this.now = until;
        return;
      }
      this.now = next.time;
      this.events += 1;
      next.run();
    }
  }
}

/**
 * c identical servers in front of one FIFO queue. Each job brings its service time; `done` runs
 * when it leaves. Busy time is integrated exactly, so utilisation = busy / (c * elapsed).
 */
export class Station {
  private readonly waiting = new Fifo<{ service: number; done: () => void; arrived: number }>();
  private busy = 0;
  private busyArea = 0;
  private lastChange = 0;
  private queueArea = 0;
  /** Jobs that finished, and their total time in the station (wait + service). */
  completed = 0;
  sojournTotal = 0;

  constructor(
    private readonly sim: Simulation,
    readonly servers: number,
  ) {
    if (!(Number.isInteger(servers) && servers >= 1))
      throw new RangeError(`servers must be an integer >= 1, got ${servers}`);
  }

  /** Jobs in service plus jobs waiting. */
  get inSystem(): number {
    return this.busy + this.waiting.length;
  }

  submit(service: number, done: () => void): void {
    this.account();
    this.waiting.push({ service, done, arrived: this.sim.now });
    this.dispatch();
  }

  private dispatch(): void {
    while (this.busy < this.servers && this.waiting.length > 0) {
      const job = this.waiting.shift() as { service: number; done: () => void; arrived: number };
      this.busy += 1;
      this.sim.after(job.service, () => {
        this.account();
        this.busy -= 1;
        this.completed += 1;
        this.sojournTotal += this.sim.now - job.arrived;
        this.dispatch();
        job.done();
      });
    }
  }

  private account(): void {
    const dt = this.sim.now - this.lastChange;
    this.busyArea += this.busy * dt;
    this.queueArea += (this.busy + this.waiting.length) * dt;
    this.lastChange = this.sim.now;
  }

  /** Busy fraction of the c servers since time 0. */
  utilisation(): number {
    this.account();
    return this.sim.now > 0 ? this.busyArea / (this.servers * this.sim.now) : 0;
  }

  /** Time-average number in the station (L of Little's law). */
  meanInSystem(): number {
    this.account();
    return this.sim.now > 0 ? this.queueArea / this.sim.now : 0;
  }
}

/**
 * A pool of identical slots (env sessions, rollout slots): `acquire` runs its callback when a
 * slot is free, in request order; `release` frees one. Tracks the time-average slots held.
 */
export class SlotPool {
  private held = 0;
  private readonly waiting = new Fifo<() => void>();
  private heldArea = 0;
  private lastChange = 0;

  constructor(
    private readonly sim: Simulation,
    readonly capacity: number,
  ) {
    if (!(Number.isInteger(capacity) && capacity >= 1))
      throw new RangeError(`capacity must be an integer >= 1, got ${capacity}`);
  }

  get inUse(): number {
    return this.held;
  }

  get queued(): number {
    return this.waiting.length;
  }

  acquire(then: () => void): void {
    if (this.held < this.capacity) {
      this.account();
      this.held += 1;
      then();
    } else this.waiting.push(then);
  }

  release(): void {
    this.account();
    const next = this.waiting.shift();
    if (next) next();
    else this.held -= 1;
  }

  private account(): void {
    this.heldArea += this.held * (this.sim.now - this.lastChange);
    this.lastChange = this.sim.now;
  }

  /** Time-average share of the slots held since time 0. */
  utilisation(): number {
    this.account();
    return this.sim.now > 0 ? this.heldArea / (this.capacity * this.sim.now) : 0;
  }
}

/** Seeded draws the model needs (one source, so a seed fixes a whole run). */
export class Draws {
  constructor(private readonly random: () => number) {}

  uniform(): number {
    return this.random() * (1 - 1e-12) + 1e-12;
  }

  /** Exponential with the given mean. */
  exponential(mean: number): number {
    return -mean * Math.log(this.uniform());
  }

  /** Lognormal with median `median` and log-sd `sigma`, capped at `max`. */
  lognormal(median: number, sigma: number, max = Number.POSITIVE_INFINITY): number {
    if (median <= 0) return 0;
    const normal = Math.sqrt(-2 * Math.log(this.uniform())) * Math.cos(2 * Math.PI * this.random());
    return Math.min(max, median * Math.exp(sigma * normal));
  }
}
