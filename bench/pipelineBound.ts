/**
 * An upper bound on the async pipeline's trajectories/s, and so on its speedup over sync, from the
 * measured episode times and trainer step times (`npm run bench:pipeline` prints it beside the
 * measured speedup).
 *
 * Notation: n = group size, B = groups per sync step, W = episodes the async feeder lets be
 * outstanding (requests queued or running + trajectories not yet acknowledged by the trainer;
 * `inFlightGroupCap * n`), C = episodes the rollout workers run at once (workers * concurrency),
 * D = one episode's duration (start to finish), G = its group's duration (the slowest member's
 * D: a group is trainable only when all n are done), h = time from a group being complete to its
 * messages being acknowledged: at least the train step and publish of the step that trains it.
 *
 * Async, by Little's law (mean number in a system = rate * mean time spent in it):
 * - window: every episode is outstanding from its request (the n of a group are sent together) to
 *   its acknowledgement, which is at least G + h, and at most W are outstanding, so
 *   rate <= W / (E[G] + E[h]), E[h] the mean over trajectories of the step + publish that
 *   trained them (each step's time weighted by the trajectories it took);
 * - slots: every episode holds a rollout slot for D, and at most C are held, so rate <= C / E[D].
 * The bound is the lesser of the two. The trainer's speed enters through h: a slow trainer makes
 * every trajectory wait longer before it is acknowledged, which the window charges (a separate
 * "trainer rate" limit W / E[h] would never be the lesser one). Left out, so the bound is not
 * tight: the wait of a complete group for B-1 more (the trainer takes at least B) and for the step
 * in progress to end, the feeder's polling.
 *
 * Assumptions: the episode and step times fed in are those of the async run (CPU contention makes
 * them longer there than in sync, so the sync run's times give a prediction, not a bound); the
 * window is measured between two step ends and counts the trajectories trained in it (a finite
 * window adds the edge term W / window, see `windowSeconds`); the feeder keeps its window (it
 * counts queue depths, which may lag a moment). Nothing is assumed of the distribution's shape, of independence, or of the trainer keeping up.
 *
 * Sync (a model, to check the measurement): a step sends B groups, waits for the slowest, then
 * trains, publishes and hands the new version over, so rate = B*n / (E[max of B draws of G] + rest),
 * with `rest` the measured step interval minus the measured generation span. The speedup bound
 * divides the async bound by the *measured* sync rate, so it bounds the measured speedup whenever
 * the async bound holds.
 */

/** What the bound needs of the pipeline's configuration. */
export interface PipelineShape {
  /** Trajectories per task instance (n). */
  readonly groupSize: number;
  /** Groups per sync step (B); the async trainer takes at least this many. */
  readonly batchGroups: number;
  /** Episodes the async feeder lets be outstanding (W). */
  readonly windowEpisodes: number;
  /** Episodes the rollout workers run at once (C). */
  readonly slots: number;
}

/** One trainer step: train step + publish seconds, trajectories trained. */
export interface StepCycle {
  readonly seconds: number;
  readonly trajectories: number;
}

/** Measured times, in seconds. */
export interface MeasuredTimes {
  /** One entry per episode: start to finish (D). */
  readonly episodeSeconds: readonly number[];
  /** One entry per complete group: its slowest member (G); groups all have n members. */
  readonly groupSeconds: readonly number[];
  /** Per trainer step: its train step plus publish (what a trajectory it trains still waits), and its trajectories. */
  readonly steps: readonly StepCycle[];
  /**
   * Length of the measured window, when finite: up to W episodes (C for the slots) were already
   * outstanding when it opened and count in it without their whole time in it, so each limit
   * gains W / window (C / window). @default - a long run: no edge term
   */
  readonly windowSeconds?: number;
}

export type AsyncLimit = "window" | "slots";

export interface AsyncBound {
  /** The lesser of the two limits, trajectories/s. */
  readonly rate: number;
  readonly limitedBy: AsyncLimit;
  readonly limits: Readonly<Record<AsyncLimit, number>>;
}

function mean(xs: readonly number[]): number {
  return xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length;
}

function requirePositive(name: string, value: number): void {
  if (!(Number.isFinite(value) && value > 0)) throw new RangeError(`${name} must be a positive number, got ${value}`);
}

/** E[h]: step + publish seconds averaged over the trajectories the steps trained. */
export function meanHold(steps: readonly StepCycle[]): number {
  const trajectories = steps.reduce((sum, s) => sum + s.trajectories, 0);
  if (!(trajectories > 0)) throw new RangeError("no trainer step with trajectories measured");
  return steps.reduce((sum, s) => sum + s.seconds * s.trajectories, 0) / trajectories;
}

/**
 * E[max of k independent draws] from the empirical distribution of `samples` (with replacement):
 * sum over sorted x_(i) of x_(i) * ((i/N)^k - ((i-1)/N)^k).
 *
 * @example
 * expectedMax([1, 2, 3], 2) // 22/9: of the 9 ordered pairs, one has max 1, three max 2, five max 3
 */
export function expectedMax(samples: readonly number[], k: number): number {
  if (!Number.isInteger(k) || k < 1) throw new RangeError(`k must be an integer >= 1, got ${k}`);
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const N = sorted.length;
  return sorted.reduce((sum, x, i) => sum + x * ((i + 1) / N) ** k - x * (i / N) ** k, 0);
}

/**
 * The upper bound on async trajectories/s (see the module comment for the derivation).
 *
 * @example
 * asyncRateBound(
 *   { groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: 16 },
 *   { episodeSeconds: [1, 1], groupSeconds: [1, 1], steps: [{ seconds: 0.5, trajectories: 8 }] },
 * ) // window 16 / (1 + 0.5) = 10.7/s, slots 16 / 1 = 16/s: { rate: 10.67, limitedBy: "window" }
 */
export function asyncRateBound(shape: PipelineShape, times: MeasuredTimes): AsyncBound {
  requirePositive("windowEpisodes", shape.windowEpisodes);
  requirePositive("slots", shape.slots);
  const hold = meanHold(times.steps);
  const edge = times.windowSeconds === undefined ? 0 : 1 / times.windowSeconds;
  if (times.windowSeconds !== undefined) requirePositive("windowSeconds", times.windowSeconds);
  const limits: Record<AsyncLimit, number> = {
    window: shape.windowEpisodes / (mean(times.groupSeconds) + hold) + shape.windowEpisodes * edge,
    slots: shape.slots / mean(times.episodeSeconds) + shape.slots * edge,
  };
  const limitedBy: AsyncLimit = limits.slots < limits.window ? "slots" : "window";
  return { rate: limits[limitedBy], limitedBy, limits };
}

/**
 * The sync model's trajectories/s: B*n per (E[slowest of B groups] + rest).
 *
 * @example
 * syncRateModel({ groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: 16 }, [1, 3], 1)
 * // E[max of 2 draws of {1, 3}] = 1/4 * 1 + 3/4 * 3 = 2.5; 8 / (2.5 + 1) = 2.29/s
 */
export function syncRateModel(shape: PipelineShape, groupSeconds: readonly number[], restSeconds: number): number {
  return (shape.batchGroups * shape.groupSize) / (expectedMax(groupSeconds, shape.batchGroups) + restSeconds);
}

/** Async bound over the measured sync rate: what the measured speedup can at most be. */
export function speedupBound(asyncBound: AsyncBound, measuredSyncRate: number): number {
  requirePositive("measuredSyncRate", measuredSyncRate);
  return asyncBound.rate / measuredSyncRate;
}

/** What bench:pipeline measured of one mode, over its steady window (between two step ends). */
export interface ModeFigures {
  /** Trajectories trained in the window per second. */
  readonly rate: number;
  readonly windowSeconds: number;
  /** Episodes that finished in the window: start to finish. */
  readonly episodeSeconds: readonly number[];
  /** Groups whose last member finished in the window: their slowest member. */
  readonly groupSeconds: readonly number[];
  /** Steps in the window: `time/step_seconds + time/publish_seconds`, `rollout/trajectories`. */
  readonly steps: readonly StepCycle[];
  /** Mean step interval. */
  readonly intervalSeconds: number;
  /** sync: mean span of a batch's generation (first start to last finish); NaN in async. */
  readonly generationSeconds: number;
}

export interface BoundReport {
  /** Printed lines, the assumptions among them. */
  readonly lines: string[];
  readonly asyncOverSync: number;
  readonly bound: number;
  readonly asyncBound: AsyncBound;
  /** The sync model's rate, beside the measured one. */
  readonly syncModelRate: number;
  /** The async bound from the sync run's times alone: what one could predict before running async. */
  readonly predictedBound: number;
}

/**
 * The bound section of bench:pipeline: the async bound from the async run's times, the sync
 * model against the sync measurement, the speedup against its bound.
 */
export function boundReport(shape: PipelineShape, a: ModeFigures, s: ModeFigures): BoundReport {
  const asyncBound = asyncRateBound(shape, a);
  const rest = s.intervalSeconds - s.generationSeconds;
  const syncModelRate = syncRateModel(shape, s.groupSeconds, rest);
  const predicted = asyncRateBound(shape, { ...s, windowSeconds: a.windowSeconds });
  const bound = speedupBound(asyncBound, s.rate);
  const asyncOverSync = a.rate / s.rate;
  const f = (x: number, d = 2) => x.toFixed(d);
  const hold = meanHold(a.steps);
  const lines = [
    `bound (bench/pipelineBound.ts): n=${shape.groupSize}, B=${shape.batchGroups} groups per sync step, W=${shape.windowEpisodes} episodes in the async window, C=${shape.slots} rollout slots`,
    `  async run: E[D] ${f(mean(a.episodeSeconds))} s (${a.episodeSeconds.length} episodes), E[G] ${f(mean(a.groupSeconds))} s (${a.groupSeconds.length} groups), E[h] (step + publish) ${f(hold)} s, window ${f(a.windowSeconds, 1)} s`,
    `  window W/(E[G]+h) + W/window = ${f(asyncBound.limits.window)}/s; slots C/E[D] + C/window = ${f(asyncBound.limits.slots)}/s`,
    `  async <= ${f(asyncBound.rate)} trajectories/s (${asyncBound.limitedBy}); measured ${f(a.rate)} = ${f(a.rate / asyncBound.rate)} of it`,
    // what the bound leaves out, in figures: were the window always full, an episode was outstanding W / rate
    `  were the window always full, an episode was outstanding W/rate = ${f(shape.windowEpisodes / a.rate)} s: E[G] ${f(mean(a.groupSeconds))} + E[h] ${f(hold)} + ${f(shape.windowEpisodes / a.rate - mean(a.groupSeconds) - hold)} s other (a complete group waiting for B-1 more and for the step in progress, feeder polling, hand-offs)`,
    `  sync model B*n/(E[slowest of B groups] + rest): ${shape.batchGroups * shape.groupSize}/(${f(expectedMax(s.groupSeconds, shape.batchGroups))} + ${f(rest)}) = ${f(syncModelRate)}/s; measured ${f(s.rate)}/s`,
    `  predicted from the sync run's times alone: async <= ${f(predicted.rate)}/s, speedup <= ${f(predicted.rate / s.rate)}x`,
    `  speedup async/sync (trajectories trained/s, steady): measured ${f(asyncOverSync)}x, bound ${f(bound)}x${asyncOverSync > bound ? "  ** ABOVE THE BOUND: an assumption failed (see bench/pipelineBound.ts)" : ""}`,
    "  assumptions: at most W episodes outstanding (request to acknowledgement) and C running at once; each is",
    "  outstanding at least its group's slowest member + one train step and publish (Little's law); the bound uses",
    "  the async run's own times, so it holds whatever the distribution; sync's rate is the measured one.",
  ];
  return { lines, asyncOverSync, bound, asyncBound, syncModelRate, predictedBound: predicted.rate / s.rate };
}
