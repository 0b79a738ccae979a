import type { RolloutRequest } from "../../shared/protocol/messages.ts";
import { seededRandomFrom, shuffled } from "../../shared/rl/random.ts";

/** One task of the mix as the planner needs it. */
export interface PlannedTask {
  readonly name: string;
  /** Share of groups; interleaving follows these weights exactly (smooth weighted round-robin). */
  readonly weight: number;
  /** Train indices drawn from: [start, start + count). */
  readonly start: number;
  readonly count: number;
}

/** One task instance to roll out `groupSize` times. */
export interface PlannedGroup {
  /** Position in the experiment's group sequence (0, 1, 2, ...). */
  readonly seq: number;
  readonly task: string;
  readonly index: number;
  /** Deterministic from (seq, task, index): a re-sent group keeps its id, so downstream dedup works. */
  readonly groupId: string;
}

/** Group id of the seq-th group: `g0000042-db-317`. */
export function groupIdOf(seq: number, task: string, index: number): string {
  return `g${String(seq).padStart(7, "0")}-${task}-${index}`;
}

/**
 * The experiment's sequence of task instances, deterministic by seed:
 * - tasks interleave one group at a time in proportion to their weights (smooth weighted
 *   round-robin: equal weights give db, kg, os, db, kg, os, ...);
 * - each task walks its train indices in a seeded random order, reshuffled on every pass, so a
 *   small task set is replicated (repeats more often) while a large one is still being covered.
 *
 * @example
 * const plan = new TaskMixPlan([{ name: "db", weight: 1, start: 0, count: 100 }], 7);
 * plan.next() // { seq: 0, task: "db", index: <seeded>, groupId: "g0000000-db-<index>" }
 */
export class TaskMixPlan {
  private seq = 0;
  private readonly credit: number[];
  private readonly totalWeight: number;
  private readonly cursors: Array<{ pass: number; position: number; order: number[] }>;

  constructor(
    private readonly tasks: readonly PlannedTask[],
    private readonly seed: number,
  ) {
    if (tasks.length === 0) throw new RangeError("TaskMixPlan: the task mix is empty");
    for (const task of tasks) {
      if (!(task.weight > 0))
        throw new RangeError(`TaskMixPlan: weight of ${task.name} must be > 0, got ${task.weight}`);
      if (!(task.count >= 1)) throw new RangeError(`TaskMixPlan: ${task.name} needs at least one train index`);
    }
    this.credit = tasks.map(() => 0);
    this.totalWeight = tasks.reduce((sum, t) => sum + t.weight, 0);
    this.cursors = tasks.map((task) => ({ pass: 0, position: 0, order: this.order(task, 0) }));
  }

  /** Seq of the next group `next()` returns. */
  get position(): number {
    return this.seq;
  }

  /** The next group of the sequence. */
  next(): PlannedGroup {
    // smooth weighted round-robin (as nginx): add weights, take the largest credit, charge it the total
    let best = 0;
    for (let i = 0; i < this.tasks.length; i++) {
      this.credit[i] = (this.credit[i] as number) + (this.tasks[i] as PlannedTask).weight;
      if ((this.credit[i] as number) > (this.credit[best] as number)) best = i;
    }
    this.credit[best] = (this.credit[best] as number) - this.totalWeight;
    const task = this.tasks[best] as PlannedTask;
    const cursor = this.cursors[best]!;
    if (cursor.position >= cursor.order.length) {
      cursor.pass += 1;
      cursor.position = 0;
      cursor.order = this.order(task, cursor.pass);
    }
    const index = cursor.order[cursor.position++] as number;
    const seq = this.seq++;
    return { seq, task: task.name, index, groupId: groupIdOf(seq, task.name, index) };
  }

  /** Advances to `seq` (replaying the draws, so the result equals a fresh plan stepped that far). */
  skipTo(seq: number): void {
    if (seq < this.seq) throw new RangeError(`TaskMixPlan: cannot go back from ${this.seq} to ${seq}`);
    while (this.seq < seq) this.next();
  }

  private order(task: PlannedTask, pass: number): number[] {
    const indices = Array.from({ length: task.count }, (_, i) => task.start + i);
    return shuffled(indices, seededRandomFrom(this.seed, task.name, pass));
  }
}

/** The `groupSize` rollout requests of one planned group (samples 0..n-1, one groupId). */
/** The requests of one group; `policyVersion` (sync mode) pins the weights that act (RolloutRequest). */
export function requestsOf(
  group: PlannedGroup,
  experimentId: string,
  groupSize: number,
  policyVersion?: number,
): RolloutRequest[] {
  return Array.from({ length: groupSize }, (_, sample) => ({
    schemaVersion: 1 as const,
    experimentId,
    task: group.task,
    index: group.index,
    split: "train" as const,
    groupId: group.groupId,
    sample,
    groupSize,
    attempt: 0,
    ...(policyVersion === undefined || policyVersion < 0 ? {} : { policyVersion }),
  }));
}
