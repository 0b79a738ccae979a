import { describe, expect, it } from "vitest";
import {
  asyncRateBound,
  boundReport,
  expectedMax,
  type MeasuredTimes,
  type PipelineShape,
  type StepCycle,
  speedupBound,
  syncRateModel,
} from "../../bench/pipelineBound.ts";
import { PipelineSummary } from "../../bench/summary.ts";
import { seededRandom } from "../../shared/rl/random.ts";

/** Draws the n member durations of one group (s). */
type GroupDraw = () => number[];

/** Heavy-tailed group durations: a shared lognormal or Pareto base, members within +-10% of it. */
function groups(kind: "lognormal" | "pareto", spread: number, n: number, seed: number): GroupDraw {
  const random = seededRandom(seed);
  const u = () => random() * (1 - 1e-12) + 1e-12;
  const base = () => {
    if (kind === "pareto") return 0.2 * u() ** (-1 / spread); // scale 0.2 s, tail index `spread`
    const normal = Math.sqrt(-2 * Math.log(u())) * Math.cos(2 * Math.PI * random());
    return 0.4 * Math.exp(spread * normal); // median 0.4 s, sigma `spread`
  };
  return () => {
    const b = base();
    return Array.from({ length: n }, () => b * (0.9 + 0.2 * random()));
  };
}

/** Train step + publish for k trajectories (s). */
type StepTime = (k: number) => number;

interface Simulated {
  readonly rate: number;
  readonly times: MeasuredTimes;
}

/**
 * The async pipeline as an event simulation: the feeder sends a group whenever n more fit in the
 * window W; C rollout slots take requests in order; the trainer, when idle and at least B groups
 * are complete, takes every complete group, and acknowledges them (freeing the window) when its
 * step ends. Rate: trajectories consumed from the end of the 10th step to the last.
 */
function simulateAsync(shape: PipelineShape, draw: GroupDraw, step: StepTime, totalGroups: number): Simulated {
  const n = shape.groupSize;
  const queue: Array<{ group: number; duration: number }> = [];
  const running: Array<{ group: number; end: number; duration: number }> = [];
  const members: number[][] = [];
  const done: number[] = [];
  const complete: number[] = [];
  const episodeSeconds: number[] = [];
  const groupSeconds: number[] = [];
  const steps: StepCycle[] = [];
  const stepEnds: Array<{ time: number; consumed: number }> = [];
  let t = 0;
  let outstanding = 0;
  let trainer: { end: number; groups: number[] } | undefined;
  for (;;) {
    while (outstanding + n <= shape.windowEpisodes && members.length < totalGroups) {
      const g = members.length;
      members.push(draw());
      done.push(0);
      outstanding += n;
      for (const duration of members[g] as number[]) queue.push({ group: g, duration });
    }
    while (running.length < shape.slots && queue.length > 0) {
      const r = queue.shift() as { group: number; duration: number };
      running.push({ group: r.group, end: t + r.duration, duration: r.duration });
    }
    if (!trainer && complete.length >= shape.batchGroups) {
      const taken = complete.splice(0);
      const seconds = step(taken.length * n);
      steps.push({ seconds, trajectories: taken.length * n });
      trainer = { end: t + seconds, groups: taken };
    }
    const nextEpisode = running.reduce((min, r) => Math.min(min, r.end), Number.POSITIVE_INFINITY);
    const next = Math.min(nextEpisode, trainer?.end ?? Number.POSITIVE_INFINITY);
    if (next === Number.POSITIVE_INFINITY) break;
    t = next;
    if (trainer && trainer.end === t) {
      outstanding -= trainer.groups.length * n;
      stepEnds.push({ time: t, consumed: trainer.groups.length * n });
      trainer = undefined;
    }
    for (let i = running.length - 1; i >= 0; i--) {
      const r = running[i] as { group: number; end: number; duration: number };
      if (r.end !== t) continue;
      running.splice(i, 1);
      episodeSeconds.push(r.duration);
      done[r.group] = (done[r.group] as number) + 1;
      if (done[r.group] === n) {
        complete.push(r.group);
        groupSeconds.push(Math.max(...(members[r.group] as number[])));
      }
    }
  }
  const from = stepEnds[9] as { time: number };
  const last = stepEnds[stepEnds.length - 1] as { time: number };
  const consumed = stepEnds.slice(10).reduce((sum, s) => sum + s.consumed, 0);
  return { rate: consumed / (last.time - from.time), times: { episodeSeconds, groupSeconds, steps } };
}

/** Sync: B groups at once (B*n <= C), wait for the slowest member, then the step. */
function simulateSync(shape: PipelineShape, draw: GroupDraw, step: StepTime, steps: number) {
  const k = shape.batchGroups * shape.groupSize;
  let t = 0;
  let generation = 0;
  const groupSeconds: number[] = [];
  for (let s = 0; s < steps; s++) {
    const batch = Array.from({ length: shape.batchGroups }, () => Math.max(...draw()));
    groupSeconds.push(...batch);
    generation += Math.max(...batch);
    t += Math.max(...batch) + step(k);
  }
  return { rate: (k * steps) / t, groupSeconds, intervalSeconds: t / steps, generationSeconds: generation / steps };
}

describe("expectedMax", () => {
  it("hand-worked: max of two draws from {1, 2, 3}", () => {
    // 9 ordered pairs: max 1 once, max 2 three times, max 3 five times -> (1 + 6 + 15) / 9
    expect(expectedMax([3, 1, 2], 2)).toBeCloseTo(22 / 9, 12);
  });

  it("one draw is the mean; a constant sample is its value; more draws never lower it", () => {
    expect(expectedMax([1, 2, 6], 1)).toBeCloseTo(3, 12);
    expect(expectedMax([2.5, 2.5, 2.5], 7)).toBeCloseTo(2.5, 12);
    const sample = [0.1, 0.5, 0.7, 3, 12];
    for (let k = 1; k < 8; k++) expect(expectedMax(sample, k + 1)).toBeGreaterThan(expectedMax(sample, k));
    expect(expectedMax(sample, 200)).toBeCloseTo(12, 6);
  });

  it("refuses a k that is not a positive integer", () => {
    expect(() => expectedMax([1], 0)).toThrow(/k must be an integer >= 1, got 0/);
  });
});

describe("asyncRateBound", () => {
  it("hand-worked: window-limited, then slot-limited", () => {
    // E[h] = (0.2 * 8 + 0.6 * 24) / 32 = 0.5 s, weighted by trajectories
    // window: 16 / (mean G 2 + 0.5) = 6.4/s; slots: 8 / mean D 1.5 = 5.33/s
    const steps = [
      { seconds: 0.2, trajectories: 8 },
      { seconds: 0.6, trajectories: 24 },
    ];
    const times = { episodeSeconds: [1, 2], groupSeconds: [1, 3], steps };
    const wide = asyncRateBound({ groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: 16 }, times);
    expect(wide.limitedBy).toBe("window");
    expect(wide.rate).toBeCloseTo(6.4, 12);
    const narrow = asyncRateBound({ groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: 8 }, times);
    expect(narrow.limitedBy).toBe("slots");
    expect(narrow.rate).toBeCloseTo(8 / 1.5, 12);
    // a 20 s window: episodes outstanding when it opened add W / 20 = 0.8/s (slots C / 20 = 0.4/s)
    const short = asyncRateBound(
      { groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: 8 },
      {
        ...times,
        windowSeconds: 20,
      },
    );
    expect(short.limits.window).toBeCloseTo(6.4 + 0.8, 12);
    expect(short.limits.slots).toBeCloseTo(8 / 1.5 + 0.4, 12);
  });

  it("refuses a run without a trainer step", () => {
    expect(() =>
      asyncRateBound(
        { groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: 16 },
        { episodeSeconds: [1], groupSeconds: [1], steps: [] },
      ),
    ).toThrow(/no trainer step/);
  });
});

describe("the bound holds on simulated pipelines", () => {
  const fast = (k: number) => 0.2 + 0.01 * k;
  const fastest = (k: number) => 0.1 + 0.005 * k;
  const slow = (k: number) => 2 + 0.2 * k;
  const cases = [
    { name: "lognormal sigma 1, fast trainer", kind: "lognormal", spread: 1, slots: 16, step: fast },
    { name: "lognormal sigma 2, fast trainer", kind: "lognormal", spread: 2, slots: 16, step: fast },
    { name: "pareto 1.5, fast trainer", kind: "pareto", spread: 1.5, slots: 16, step: fastest },
    { name: "lognormal sigma 1, slow trainer", kind: "lognormal", spread: 1, slots: 16, step: slow },
    { name: "pareto 1.5, few slots", kind: "pareto", spread: 1.5, slots: 6, step: fastest },
  ] as const;

  for (const c of cases)
    it(c.name, () => {
      const shape = { groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: c.slots };
      const a = simulateAsync(shape, groups(c.kind, c.spread, 4, 11), c.step, 4000);
      const s = simulateSync({ ...shape, slots: 16 }, groups(c.kind, c.spread, 4, 12), c.step, 4000);
      const bound = asyncRateBound(shape, a.times);
      // Little's law on a long run: the simulated rate stays under the bound (1% for the run's ends)
      expect(a.rate).toBeLessThanOrEqual(bound.rate * 1.01);
      expect(a.rate / s.rate).toBeLessThanOrEqual(speedupBound(bound, s.rate) * 1.01);
      // and the bound is not vacuous: the simulation reaches a good part of it
      expect(a.rate).toBeGreaterThan(bound.rate * 0.5);
    });

  it("the sync model matches a simulated sync run", () => {
    const shape = { groupSize: 4, batchGroups: 4, windowEpisodes: 32, slots: 16 };
    const step = (k: number) => 0.3 + 0.02 * k;
    const s = simulateSync(shape, groups("lognormal", 1.5, 4, 5), step, 20_000);
    // rest = step(B*n); E[max of B] from the run's own group durations
    const model = syncRateModel(shape, s.groupSeconds, step(16));
    expect(Math.abs(model / s.rate - 1)).toBeLessThan(0.05);
  });

  it("a heavy tail is what lets async pass the window factor W / (B*n)", () => {
    // W = 2 batches: on a constant workload async gains at most ~2x; on a heavy tail sync waits
    // for the slowest of B groups every step while async does not, so the bound goes well past 2
    const shape = { groupSize: 4, batchGroups: 4, windowEpisodes: 32, slots: 32 };
    const step = (k: number) => 0.1 + 0.002 * k;
    const ratio = (kind: "lognormal", spread: number) => {
      const a = simulateAsync(shape, groups(kind, spread, 4, 21), step, 4000);
      const s = simulateSync(shape, groups(kind, spread, 4, 22), step, 4000);
      return { measured: a.rate / s.rate, bound: speedupBound(asyncRateBound(shape, a.times), s.rate) };
    };
    const flat = ratio("lognormal", 0.05);
    const heavy = ratio("lognormal", 1.5);
    expect(flat.bound).toBeLessThan(2.1);
    expect(heavy.measured).toBeGreaterThan(2.5);
    expect(heavy.measured).toBeLessThanOrEqual(heavy.bound * 1.01);
  });
});

describe("boundReport (the bench's bound section)", () => {
  it("on a simulated heavy-tailed pair of runs: bound above the measurement, sync model near it", () => {
    const shape = { groupSize: 4, batchGroups: 4, windowEpisodes: 32, slots: 32 };
    const step = (k: number) => 0.3 + 0.01 * k;
    const a = simulateAsync(shape, groups("lognormal", 1.5, 4, 31), step, 3000);
    const s = simulateSync(shape, groups("lognormal", 1.5, 4, 32), step, 3000);
    const report = boundReport(
      shape,
      { ...a.times, rate: a.rate, windowSeconds: 3000, intervalSeconds: Number.NaN, generationSeconds: Number.NaN },
      {
        rate: s.rate,
        windowSeconds: 3000,
        episodeSeconds: s.groupSeconds,
        groupSeconds: s.groupSeconds,
        steps: [{ seconds: step(16), trajectories: 16 }],
        intervalSeconds: s.intervalSeconds,
        generationSeconds: s.generationSeconds,
      },
    );
    expect(report.asyncOverSync).toBeCloseTo(a.rate / s.rate, 12);
    expect(report.asyncOverSync).toBeLessThanOrEqual(report.bound);
    expect(Math.abs(report.syncModelRate / s.rate - 1)).toBeLessThan(0.05);
    expect(report.lines.join("\n")).toMatch(/measured \d+\.\d\dx, bound \d+\.\d\dx$/m);
    expect(report.lines.join("\n")).not.toMatch(/ABOVE THE BOUND/);
    // the summary line the bench prints from it parses back with its keys
    const line = JSON.stringify(
      PipelineSummary.parse({
        asyncOverSync: report.asyncOverSync,
        bound: report.bound,
        asyncTrajPerS: a.rate,
        syncTrajPerS: s.rate,
        limitedBy: report.asyncBound.limitedBy,
        asyncCompareNiceTrajPerS: null,
        load1: 1.5,
      }),
    );
    expect(Object.keys(JSON.parse(line))).toEqual(expect.arrayContaining(["asyncOverSync", "bound"]));
  });

  it("says so when a measurement passes the bound", () => {
    const shape = { groupSize: 4, batchGroups: 2, windowEpisodes: 16, slots: 16 };
    const times = {
      episodeSeconds: [1],
      groupSeconds: [1],
      steps: [{ seconds: 1, trajectories: 8 }],
      windowSeconds: 100,
    };
    // bound: 16 / (1 + 1) + 16 / 100 = 8.16/s; an async rate of 9/s is above it
    const figures = { ...times, intervalSeconds: 3, generationSeconds: 1 };
    const report = boundReport(shape, { ...figures, rate: 9 }, { ...figures, rate: 2 });
    expect(report.bound).toBeCloseTo(8.16 / 2, 12);
    expect(report.lines.join("\n")).toMatch(/ABOVE THE BOUND/);
  });
});
