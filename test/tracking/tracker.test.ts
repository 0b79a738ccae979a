import { describe, expect, it } from "vitest";
import { flattenParams } from "../../shared/tracking/index.ts";
import {
  FanOutTracker,
  QueuedTracker,
  type QueueOptions,
  type RunStatus,
  type TrackerRecord,
  TrackerRejectedError,
  type TrackerSink,
} from "../../shared/tracking/tracker.ts";

/** A sink that fails its first `failures` writes (unit test: a scripted stand-in, no I/O). */
class ScriptedSink implements TrackerSink {
  readonly name = "scripted";
  readonly written: TrackerRecord[] = [];
  calls = 0;
  finished: RunStatus | undefined;
  constructor(
    private failures: number,
    private readonly error: () => Error = () => new Error("server away"),
  ) {}
  async write(records: readonly TrackerRecord[]): Promise<void> {
    this.calls += 1;
    if (this.failures > 0) {
      this.failures -= 1;
      throw this.error();
    }
    this.written.push(...records);
  }
  async finish(status: RunStatus): Promise<void> {
    this.finished = status;
  }
}

function options(overrides: Partial<QueueOptions> = {}): QueueOptions & { waits: number[]; warnings: string[] } {
  const waits: number[] = [];
  const warnings: string[] = [];
  return {
    queueLimit: 100,
    retries: 3,
    retryBaseSeconds: 0.5,
    finishSeconds: 30,
    warn: (m) => warnings.push(m),
    sleep: async (ms) => {
      waits.push(ms);
    },
    now: () => 1_000,
    waits,
    warnings,
    ...overrides,
  };
}

describe("QueuedTracker", () => {
  it("retries a failing write with doubling backoff and then writes it", async () => {
    const sink = new ScriptedSink(2);
    const o = options();
    const tracker = new QueuedTracker(sink, o);
    tracker.scalars(1, { "loss/total": 1 });
    await tracker.finish("FINISHED");
    expect(o.waits).toEqual([500, 1000]); // 0.5 s, then doubled
    expect(sink.written).toEqual([{ kind: "scalars", step: 1, wallTime: 1_000, values: { "loss/total": 1 } }]);
    expect(tracker.dropped).toBe(0);
    expect(o.warnings).toEqual([]);
    expect(sink.finished).toBe("FINISHED");
  });

  it("drops a batch after its retries, counts each record, and warns once", async () => {
    const sink = new ScriptedSink(100);
    const o = options({ retries: 2 });
    const tracker = new QueuedTracker(sink, o);
    tracker.scalars(1, { a: 1 });
    await Promise.resolve();
    tracker.scalars(2, { a: 2 });
    tracker.scalars(3, { a: 3 });
    await tracker.finish("FAILED");
    expect(tracker.dropped).toBe(3);
    expect(o.warnings).toHaveLength(1);
    expect(o.warnings[0]).toMatch(/^scripted: .*tracking\/dropped.*server away/);
  });

  it("does not retry a rejection, and a rejected batch is retried record by record", async () => {
    // the first write (the whole batch) and the first single record are rejected; the second record passes
    const sink = new ScriptedSink(2, () => new TrackerRejectedError("HTTP 400"));
    const o = options();
    const tracker = new QueuedTracker(sink, o);
    tracker.params({ lr: "0.1" });
    tracker.scalars(1, { a: 1 });
    await tracker.finish("FINISHED");
    expect(o.waits).toEqual([]);
    expect(tracker.dropped).toBe(1);
    expect(sink.written.map((r) => r.kind)).toEqual(["scalars"]);
  });

  it("bounds the queue: a record beyond the limit is dropped and counted, never waited for", async () => {
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    const sink = new ScriptedSink(0);
    const slow: TrackerSink = {
      name: "slow",
      write: async (records) => {
        await gate;
        await sink.write(records);
      },
      finish: (s) => sink.finish(s),
    };
    const tracker = new QueuedTracker(slow, options({ queueLimit: 2, batchLimit: 1 }));
    for (let step = 1; step <= 3; step += 1) tracker.scalars(step, { a: step }); // returns at once
    expect(tracker.dropped).toBe(1); // steps 1 and 2 wait; 3 finds the queue full
    await new Promise((r) => setImmediate(r)); // the pump takes step 1 into its (held) write
    tracker.scalars(4, { a: 4 });
    tracker.scalars(5, { a: 5 });
    expect(tracker.dropped).toBe(2); // 4 queued beside 2, 5 dropped
    release();
    await tracker.finish("FINISHED");
    expect(sink.written.map((r) => (r.kind === "scalars" ? r.step : -1))).toEqual([1, 2, 4]);
  });

  it("finish gives up on a sink that never answers after finishSeconds, counting what was left", async () => {
    const never: TrackerSink = { name: "never", write: () => new Promise(() => {}), finish: async () => {} };
    const o = options({ finishSeconds: 0.05 });
    const tracker = new QueuedTracker(never, o);
    tracker.scalars(1, { a: 1 });
    tracker.scalars(2, { a: 2 });
    await tracker.finish("FINISHED"); // resolves although the write never does
    expect(tracker.dropped).toBe(2);
    expect(o.warnings[0]).toMatch(/the run ended before they were written/);
  });
});

describe("FanOutTracker", () => {
  it("sends every record to every tracker and sums their drops", async () => {
    const good = new ScriptedSink(0);
    const bad = new ScriptedSink(100);
    const o = options({ retries: 0 });
    const tracker = new FanOutTracker([new QueuedTracker(good, o), new QueuedTracker(bad, o)]);
    tracker.params({ a: "1" }, { "mlflow.source.git.commit": "abc" });
    tracker.histogram(1, "advantages", [1, -1]);
    tracker.text(1, "evaluation", "| a |");
    await tracker.finish("FINISHED");
    expect(good.written.map((r) => r.kind)).toEqual(["params", "histogram", "text"]);
    expect(tracker.dropped).toBe(3);
    expect(good.finished).toBe("FINISHED");
    expect(bad.finished).toBe("FINISHED");
  });
});

describe("flattenParams", () => {
  it("names nested fields by path and array items by index", () => {
    expect(flattenParams({ a: { b: 1, c: [{ d: "x" }, 2] }, e: true, f: [], g: undefined })).toEqual({
      "a.b": "1",
      "a.c.0.d": "x",
      "a.c.1": "2",
      e: "true",
      f: "[]",
    });
  });
});
