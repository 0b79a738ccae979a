import { describe, expect, it } from "vitest";
import { parseConfig } from "../../shared/config/index.ts";
import {
  EngineRecordError,
  EngineVersionWatch,
  engineIdOf,
  readEngineRecord,
  sameReady,
  withEngineRecord,
} from "../../shared/policy/engine-sync.ts";
import { MemoryObjectStore } from "../../shared/transport/memory.ts";

/** A store whose reads take `ms` and are logged with the moment they began. */
function slowStore(inner: MemoryObjectStore, ms: number) {
  const began: number[] = [];
  return {
    began,
    getText: async (key: string) => {
      began.push(performance.now());
      await new Promise((resolve) => setTimeout(resolve, ms));
      return inner.getText(key);
    },
  };
}

describe("engine sync records (engines/<id>.json)", () => {
  it("bracket a load with loading then ready, continue the stored seq, and stay loading when the load fails", async () => {
    const store = new MemoryObjectStore();
    const seen: unknown[] = [];
    const ready = await withEngineRecord(store, "vllm-a", 4, async () => {
      seen.push(await readEngineRecord(store, "vllm-a")); // what a reader sees during the load
    });
    expect(seen).toEqual([expect.objectContaining({ version: 4, state: "loading", seq: 1 })]);
    expect(ready).toMatchObject({ engineId: "vllm-a", version: 4, state: "ready", seq: 2 });
    // a second syncer (a restarted trainer) continues from the stored seq
    await expect(
      withEngineRecord(store, "vllm-a", 5, async () => {
        throw new Error("engine refused");
      }),
    ).rejects.toThrow("engine refused");
    expect(await readEngineRecord(store, "vllm-a")).toMatchObject({ version: 5, state: "loading", seq: 3 });
    // loading 4, ready 5
    expect((await withEngineRecord(store, "vllm-a", 5, async () => {})).seq).toBe(5);
  });

  it("refuses a malformed record or one naming another engine", async () => {
    const store = new MemoryObjectStore();
    await store.put("engines/a.json", '{"version": 1}');
    await expect(readEngineRecord(store, "a")).rejects.toThrow(/engines\/a\.json: .*schemaVersion/);
    await store.put(
      "engines/b.json",
      JSON.stringify({ schemaVersion: 1, engineId: "c", version: 1, state: "ready", seq: 2, updatedAt: "t" }),
    );
    await expect(readEngineRecord(store, "b")).rejects.toThrow(/names engine "c"/);
    await expect(readEngineRecord(store, "B/../x")).rejects.toBeInstanceOf(EngineRecordError);
    // a record that cannot be read makes the syncer stop before touching the engine
    let loaded = false;
    await expect(
      withEngineRecord(store, "a", 2, async () => {
        loaded = true;
      }),
    ).rejects.toBeInstanceOf(EngineRecordError);
    expect(loaded).toBe(false);
  });

  it("sameReady holds only for the same ready record", () => {
    const ready = {
      schemaVersion: 1 as const,
      engineId: "a",
      version: 3,
      state: "ready" as const,
      seq: 6,
      updatedAt: "t",
    };
    expect(sameReady(ready, { ...ready })).toBe(true);
    expect(sameReady(ready, { ...ready, seq: 8 })).toBe(false);
    expect(sameReady(ready, { ...ready, state: "loading", seq: 7, version: 4 })).toBe(false);
    expect(sameReady(ready, undefined)).toBe(false);
  });

  it("shares reads among concurrent callers, each served by a read begun after it asked", async () => {
    const inner = new MemoryObjectStore();
    await withEngineRecord(inner, "a", 1, async () => {});
    const store = slowStore(inner, 30);
    const watch = new EngineVersionWatch(store, "a");
    const first = watch.fresh();
    await new Promise((resolve) => setTimeout(resolve, 5));
    // ten callers while the first read is in flight: they share one read, begun after they asked
    const asked = performance.now();
    const rest = Array.from({ length: 10 }, () => watch.fresh());
    const records = await Promise.all([first, ...rest]);
    expect(records.every((r) => r?.seq === 2)).toBe(true);
    expect(watch.reads).toBe(2);
    expect(store.began).toHaveLength(2);
    expect(store.began[1]).toBeGreaterThanOrEqual(asked);
    // the newest read serves as the read before the next request: no store read
    expect(await watch.ready(1_000)).toMatchObject({ seq: 2 });
    expect(watch.reads).toBe(2);
  });

  it("ready() polls a loading record until it is ready, and names the record when it times out", async () => {
    const store = new MemoryObjectStore();
    const watch = new EngineVersionWatch(store, "a", { pollMs: 10 });
    await expect(watch.ready(50)).rejects.toThrow(
      "engines/a.json does not exist: the trainer writes it when it syncs policy.syncEngines[id=a]",
    );
    let finish!: () => void;
    const loading = withEngineRecord(store, "a", 2, () => new Promise<void>((resolve) => (finish = resolve)));
    await new Promise((resolve) => setTimeout(resolve, 20));
    const waiting = watch.ready(5_000);
    setTimeout(() => finish(), 60);
    expect(await waiting).toMatchObject({ version: 2, state: "ready", seq: 2 });
    await loading;
  });
});

describe("config of synced engines and sync-labelled pools", () => {
  const engines = [
    { id: "vllm-a", url: "http://vllm:8000", dialect: "vllm" as const, modelDir: "/m" },
    { url: "http://sglang:30000" },
  ];

  it("derives ids from host and port, and refuses two engines on one record", () => {
    expect(engineIdOf({ url: "http://vllm:8000" })).toBe("vllm-8000");
    expect(engineIdOf({ url: "https://Engine.example.com/v1" })).toBe("engine-example-com-443");
    expect(engineIdOf({ url: "http://[::1]:30000" })).toBe("1-30000");
    expect(engineIdOf({ id: "mine", url: "http://vllm:8000" })).toBe("mine");
    expect(() =>
      parseConfig({ policy: { exportHf: true, syncEngines: [...engines, { url: "http://sglang:30000/v1" }] } }),
    ).toThrow(/policy\.syncEngines\[2\]\.id: "sglang-30000" is also the id of policy\.syncEngines\[1\]/);
    expect(() =>
      parseConfig({ policy: { exportHf: true, syncEngines: [{ id: "Bad_Id", url: "http://e:1" }] } }),
    ).toThrow(/policy\.syncEngines\[0\]\.id: lowercase letters/);
  });

  it("versionSource sync needs rollout.syncEngine naming one of policy.syncEngines", () => {
    expect(() => parseConfig({ rollout: { versionSource: "sync" } })).toThrow(
      /rollout\.syncEngine: versionSource "sync" reads engines\/<id>\.json/,
    );
    expect(() =>
      parseConfig({
        policy: { exportHf: true, syncEngines: engines },
        rollout: { versionSource: "sync", syncEngine: "vllm-b" },
      }),
    ).toThrow(/rollout\.syncEngine: "vllm-b" is no engine of policy\.syncEngines \(ids: vllm-a, sglang-30000\)/);
    const config = parseConfig({
      policy: { exportHf: true, syncEngines: engines },
      rollout: { versionSource: "sync", syncEngine: "sglang-30000" },
    });
    expect(config.rollout).toMatchObject({ versionSource: "sync", syncEngine: "sglang-30000", syncRetries: 3 });
    expect(parseConfig({}).rollout.versionSource).toBe("response");
  });
});
