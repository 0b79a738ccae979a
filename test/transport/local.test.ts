import { spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { mkdir, readdir, unlink, utimes, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { TransportError } from "../../shared/transport/errors.ts";
import { LocalObjectStore, LocalTransport } from "../../shared/transport/local.ts";
import { registerTransportConformance } from "./conformance.ts";
import { registerCrashSafety } from "./crash.ts";
import { localTarget } from "./target.ts";

const target = localTarget();
const CHILDREN = fileURLToPath(new URL("./children/", import.meta.url));

describe("local transport conformance", () => {
  registerTransportConformance(() => target);
  registerCrashSafety(() => target, { objectBytes: 4 * 1024 * 1024 });
});

describe.concurrent("local transport specifics", () => {
  afterAll(async () => {
    await target.cleanup();
  });

  it("a long poll sleeps until another process commits: the folder watch wakes it", async () => {
    const config = await target.freshConfig();
    // Two connections in one process share nothing but the database file, as two processes do.
    const receiver = new LocalTransport(config);
    const sender = new LocalTransport(config);
    try {
      if (process.platform === "linux") expect(receiver.database.watchesCommits).toBe(true);
      const before = receiver.database.changeCount;
      const polling = receiver.queue("rollout-requests").receive({ waitSeconds: 20 });
      await sender.queue("rollout-requests").send("from the other connection");
      const [message] = await polling;
      expect(message?.body).toBe("from the other connection");
      if (receiver.database.watchesCommits) expect(receiver.database.changeCount).toBeGreaterThan(before);
    } finally {
      await sender.close();
      await receiver.close();
    }
  });

  it("a long poll looks again when a message in flight becomes visible, which no commit announces", async () => {
    const config = await target.freshConfig();
    const transport = new LocalTransport(config);
    try {
      const queue = transport.queue("rollout-requests");
      await queue.send("comes back");
      const [first] = await queue.receive({ visibilityTimeoutSeconds: 1 });
      expect(first?.body).toBe("comes back");
      const started = Date.now();
      const [again] = await queue.receive({ waitSeconds: 20 });
      expect(again?.body).toBe("comes back");
      // at its visibility timeout (1 s), not at the end of the 20 s wait
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await transport.close();
    }
  });

  it("messages, in-flight state and dead letters survive closing and reopening the database", async () => {
    const config = await target.freshConfig({ maxReceiveCount: 1 });
    const first = new LocalTransport(config);
    await first.queue("rollout-requests").sendBatch(["kept", "in flight", "doomed"]);
    const [inFlight] = await first.queue("rollout-requests").receive({ visibilityTimeoutSeconds: 60 });
    await first.close();

    const second = new LocalTransport(config);
    try {
      const queue = second.queue("rollout-requests");
      expect(await queue.approximateDepth()).toEqual({ visible: 2, inFlight: 1 });
      const [next] = await queue.receive();
      await queue.fail(next!.receiptHandle, "bad input");
      await queue.delete(inFlight!.receiptHandle);
      expect(await queue.approximateDepth()).toEqual({ visible: 1, inFlight: 0 });
    } finally {
      await second.close();
    }
    const third = new LocalTransport(config);
    try {
      expect(await third.queue("rollout-requests").deadLetters()).toMatchObject([
        { body: "in flight", reason: "bad input" },
      ]);
    } finally {
      await third.close();
    }
  });

  it("several processes draining one queue together get every message exactly once", async () => {
    const config = await target.freshConfig();
    const transport = new LocalTransport(config);
    const doneFile = join(config.localDir, "all-sent");
    try {
      const children = [0, 1, 2].map(() =>
        spawn(process.execPath, ["--import", "tsx", `${CHILDREN}drainer.ts`], {
          env: { ...process.env, AGENTRL_CRASH_CONFIG: JSON.stringify(config), AGENTRL_DRAIN_DONE_FILE: doneFile },
          stdio: ["ignore", "pipe", "inherit"],
        }),
      );
      const outputs = children.map(
        (child) =>
          new Promise<string>((resolve, reject) => {
            let out = "";
            child.stdout.on("data", (chunk: Buffer) => {
              out += chunk.toString();
            });
            child.once("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`drainer exited ${code}`))));
          }),
      );
      await Promise.all(
        children.map(
          (child) =>
            new Promise<void>((resolve) => {
              child.stdout.once("data", () => resolve());
            }),
        ),
      );
      const bodies = Array.from({ length: 300 }, (_, i) => `m${i}`);
      const sent: string[] = [];
      for (let i = 0; i < bodies.length; i += 20)
        sent.push(...(await transport.queue("trajectories").sendBatch(bodies.slice(i, i + 20))));
      writeFileSync(doneFile, "");
      const received = (await Promise.all(outputs)).flatMap((out) => {
        const line = out.split("\n").find((l) => l.startsWith("{"));
        return (JSON.parse(line ?? "{}") as { received?: string[] }).received ?? [];
      });
      expect(received).toHaveLength(300);
      expect(new Set(received)).toEqual(new Set(sent));
      expect(await transport.queue("trajectories").approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    } finally {
      await transport.close();
    }
  });

  it("leaves no temp files behind and keeps them out of the store's folder", async () => {
    const config = await target.freshConfig();
    const store = new LocalObjectStore(join(config.localDir, "objects", "checkpoints"));
    await store.put("policies/v1/weights.bin", new Uint8Array(1000));
    expect(await store.putIfAbsent("policies/v1/weights.bin", "again")).toBe(false);
    expect(await store.putIfAbsent("policies/v1/manifest.json", "{}")).toBe(true);
    expect(await readdir(store.tmpDir)).toEqual([]);
    expect(await readdir(join(store.dir, "policies", "v1"))).toEqual(
      expect.arrayContaining(["manifest.json", "weights.bin"]),
    );
  });

  it("removes its emptied temp folder when asked, and keeps one a write is using", async () => {
    const config = await target.freshConfig();
    const store = new LocalObjectStore(join(config.localDir, "objects", "checkpoints"));
    await store.put("policies/v0/manifest.json", "{}");
    await writeFile(join(store.tmpDir, "live-writer.part"), "partial");
    await store.removeEmptyTempDir();
    expect(await readdir(store.tmpDir)).toEqual(["live-writer.part"]);
    await unlink(join(store.tmpDir, "live-writer.part"));
    await store.removeEmptyTempDir();
    expect(existsSync(store.tmpDir)).toBe(false); // `agentrl sft --out DIR` leaves DIR alone
    await store.put("policies/v1/manifest.json", "{}"); // and the next write makes it again
    expect(await store.getText("policies/v1/manifest.json")).toBe("{}");
  });

  it("tidy leaves only the stores' folders once the writers are done, including stores this process never opened", async () => {
    const config = await target.freshConfig();
    const writer = new LocalTransport(config); // another role's connection
    const owner = new LocalTransport(config);
    try {
      await writer.store("trajectories").put("trajectories/a.json", "{}");
      await writer.store("checkpoints").put("policies/v0/manifest.json", "{}");
      const objects = join(config.localDir, "objects");
      expect((await readdir(objects)).sort()).toEqual([
        "checkpoints",
        "checkpoints.tmp",
        "trajectories",
        "trajectories.tmp",
      ]);
      await owner.tidy();
      expect((await readdir(objects)).sort()).toEqual(["checkpoints", "trajectories"]);
      expect(await owner.store("trajectories").getText("trajectories/a.json")).toBe("{}");
    } finally {
      await writer.close();
      await owner.close();
    }
  });

  it("sweeps temp files that killed writers left behind long ago, and only those", async () => {
    const config = await target.freshConfig();
    const store = new LocalObjectStore(join(config.localDir, "objects", "trajectories"));
    await mkdir(store.tmpDir, { recursive: true });
    const old = join(store.tmpDir, "dead-writer.part");
    const recent = join(store.tmpDir, "live-writer.part");
    await writeFile(old, "partial");
    await writeFile(recent, "partial");
    const twoHoursAgo = new Date(Date.now() - 2 * 3600 * 1000);
    await utimes(old, twoHoursAgo, twoHoursAgo);
    await store.put("x", "y");
    expect(await readdir(store.tmpDir)).toEqual(["live-writer.part"]);
  });

  it("a key below an existing object is refused with a clear error, reading it gives undefined", async () => {
    const config = await target.freshConfig();
    const store = new LocalObjectStore(join(config.localDir, "objects", "trajectories"));
    await store.put("a", "object a");
    await expect(store.put("a/b", "x")).rejects.toBeInstanceOf(TransportError);
    await expect(store.put("a/b", "x")).rejects.toThrow(/a parent segment is already an object/);
    expect(await store.get("a/b")).toBeUndefined();
    await store.put("c/d", "x");
    expect(await store.get("c")).toBeUndefined();
    expect(await store.head("c")).toBeUndefined();
  });
});
