import { afterAll, describe, expect, it, type TestContext } from "vitest";
import type { TransportConfig } from "../../shared/config/transport.ts";
import { ValidationError } from "../../shared/errors.ts";
import { InvalidObjectKeyError, ReceiptHandleError } from "../../shared/transport/errors.ts";
import { MAX_RECEIVE_COUNT_EXCEEDED, type Queue, type ReceivedMessage } from "../../shared/transport/types.ts";
import { openTransport, type TransportTarget } from "./target.ts";

/**
 * The contract both transports must honour, registered as vitest tests for one target. Every
 * test opens its own isolated transport, so tests never see each other's messages or objects.
 */
export function registerTransportConformance(target: () => TransportTarget): void {
  /** A fresh isolated transport, closed when the test finishes (tests run concurrently). */
  const open = async (context: TestContext, overrides: Partial<TransportConfig> = {}) => {
    const config = await target().freshConfig(overrides);
    const transport = await openTransport(config);
    context.onTestFinished(() => transport.close());
    /** A second connection to the same queues and stores, as another process would have. */
    const another = async () => {
      const other = await openTransport(config);
      context.onTestFinished(() => other.close());
      return other;
    };
    return { transport, another };
  };
  afterAll(async () => {
    await target().cleanup();
  });

  describe.concurrent("queue", () => {
    it("send, receive and delete one message", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("rollout-requests");
      const id = await queue.send('{"n":1}');
      const [message, ...rest] = await queue.receive({ waitSeconds: 1 });
      expect(rest).toEqual([]);
      expect(message).toMatchObject({ id, body: '{"n":1}', receiveCount: 1 });
      expect(typeof message!.receiptHandle).toBe("string");
      await queue.delete(message!.receiptHandle);
      expect(await queue.receive()).toEqual([]);
      expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    });

    it("keeps queues apart", async (context) => {
      const { transport } = await open(context);
      await transport.queue("trajectories").send("for trajectories");
      expect(await transport.queue("rollout-requests").receive()).toEqual([]);
      expect(await transport.queue("policy-events").receive()).toEqual([]);
      const [message] = await transport.queue("trajectories").receive();
      expect(message?.body).toBe("for trajectories");
    });

    it("sends a batch larger than one SQS batch, every body once", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("trajectories");
      const bodies = Array.from({ length: 23 }, (_, i) => `message-${i}`);
      const ids = await queue.sendBatch(bodies);
      expect(ids).toHaveLength(23);
      expect(new Set(ids).size).toBe(23);
      expect(await queue.sendBatch([])).toEqual([]);
      const received = await drain(queue, 23);
      expect(received.map((m) => m.body).sort()).toEqual([...bodies].sort());
      expect(new Set(received.map((m) => m.id))).toEqual(new Set(ids));
    });

    it("hides a received message for its visibility timeout, then redelivers it with a new handle", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("rollout-requests");
      const id = await queue.send("work");
      // 3 s, not 1: the "still hidden" checks below must hold on a heavily loaded machine too.
      const [first] = await queue.receive({ visibilityTimeoutSeconds: 3 });
      expect(first?.receiveCount).toBe(1);
      expect(await queue.receive()).toEqual([]);
      expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 1 });
      const [second] = await queue.receive({ waitSeconds: 10 });
      expect(second).toMatchObject({ id, body: "work", receiveCount: 2 });
      expect(second!.receiptHandle).not.toBe(first!.receiptHandle);
    });

    it("uses the queue's default visibility timeout when receive gives none", async (context) => {
      const { transport } = await open(context, { visibilityTimeoutSeconds: 3 });
      const queue = transport.queue("rollout-requests");
      await queue.send("work");
      await queue.receive();
      expect(await queue.receive()).toEqual([]);
      const [again] = await queue.receive({ waitSeconds: 10 });
      expect(again?.receiveCount).toBe(2);
    });

    it("changeVisibility extends or releases a delivery; a deleted handle is rejected", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("rollout-requests");
      await queue.send("work");
      const [first] = await queue.receive({ visibilityTimeoutSeconds: 1 });
      await queue.changeVisibility(first!.receiptHandle, 30);
      await sleep(1500);
      expect(await queue.receive()).toEqual([]);
      await queue.changeVisibility(first!.receiptHandle, 0);
      const [second] = await queue.receive({ waitSeconds: 2, visibilityTimeoutSeconds: 30 });
      expect(second?.receiveCount).toBe(2);
      await queue.delete(second!.receiptHandle);
      await expect(queue.changeVisibility(second!.receiptHandle, 10)).rejects.toBeInstanceOf(ReceiptHandleError);
      await expect(queue.changeVisibility(second!.receiptHandle, -1)).rejects.toBeInstanceOf(ValidationError);
    });

    it("deleting twice, or with a stale handle, does not throw", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("rollout-requests");
      await queue.send("work");
      const [first] = await queue.receive({ visibilityTimeoutSeconds: 0 });
      const [second] = await queue.receive({ visibilityTimeoutSeconds: 30 });
      expect(second?.receiveCount).toBe(2);
      await queue.delete(first!.receiptHandle);
      if (target().perDeliveryReceipts) {
        // The stale handle matched nothing: the current delivery is still in flight and still ours.
        expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 1 });
        await expect(queue.changeVisibility(first!.receiptHandle, 0)).rejects.toBeInstanceOf(ReceiptHandleError);
        await queue.fail(first!.receiptHandle, "stale");
        expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 1 });
      }
      await queue.delete(second!.receiptHandle);
      await queue.delete(second!.receiptHandle);
      expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    });

    it("a long poll returns as soon as a message arrives", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("policy-events");
      const started = Date.now();
      const polling = queue.receive({ waitSeconds: 20 });
      await sleep(300);
      await queue.send("late");
      const [message] = await polling;
      expect(message?.body).toBe("late");
      // Far below the 20 s wait: the poll ended because the message came, not because time ran out.
      expect(Date.now() - started).toBeLessThan(12_000);
    });

    it("a long poll sees a message sent by another connection (another process)", async (context) => {
      const { transport, another } = await open(context);
      const other = await another();
      const started = Date.now();
      const polling = transport.queue("policy-events").receive({ waitSeconds: 20 });
      await sleep(300);
      await other.queue("policy-events").send("from elsewhere");
      const [message] = await polling;
      expect(message?.body).toBe("from elsewhere");
      expect(Date.now() - started).toBeLessThan(12_000);
    });

    it("an empty long poll waits about waitSeconds and returns nothing", async (context) => {
      const { transport } = await open(context);
      const started = Date.now();
      expect(await transport.queue("policy-events").receive({ waitSeconds: 1 })).toEqual([]);
      expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    });

    it("receive returns at most maxMessages and two receivers never share a delivery", async (context) => {
      const { transport, another } = await open(context);
      const other = await another();
      await transport.queue("trajectories").sendBatch(["a", "b", "c", "d", "e"]);
      const mine = await transport.queue("trajectories").receive({ maxMessages: 3 });
      expect(mine.length).toBeGreaterThan(0);
      expect(mine.length).toBeLessThanOrEqual(3);
      const theirs = await drain(other.queue("trajectories"), 5 - mine.length);
      const ids = [...mine, ...theirs].map((m) => m.id);
      expect(new Set(ids).size).toBe(5);
    });

    it("one receive never returns the same message twice, even with visibility 0", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("trajectories");
      await queue.sendBatch(["x", "y"]);
      const messages = await queue.receive({ maxMessages: 10, visibilityTimeoutSeconds: 0 });
      expect(messages.map((m) => m.body).sort()).toEqual(["x", "y"]);
      expect(messages.map((m) => m.receiveCount)).toEqual([1, 1]);
    });

    it("approximateDepth counts visible and in-flight messages", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("trajectories");
      await queue.sendBatch(["1", "2", "3"]);
      expect(await queue.approximateDepth()).toEqual({ visible: 3, inFlight: 0 });
      await queue.receive({ maxMessages: 1 });
      expect(await queue.approximateDepth()).toEqual({ visible: 2, inFlight: 1 });
    });

    it("fail makes the message visible again; after maxReceiveCount it is dead-lettered with its reason", async (context) => {
      const { transport } = await open(context, { maxReceiveCount: 3 });
      const queue = transport.queue("rollout-requests");
      const id = await queue.send("poison");
      for (let delivery = 1; delivery <= 3; delivery++) {
        const [message] = await queue.receive({ waitSeconds: 2 });
        expect(message).toMatchObject({ id, receiveCount: delivery });
        await queue.fail(message!.receiptHandle, `env crashed on attempt ${delivery}`);
      }
      expect(await queue.receive({ waitSeconds: 1 })).toEqual([]);
      expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
      const dead = await queue.deadLetters();
      expect(dead).toEqual([{ id, body: "poison", receiveCount: 3, reason: "env crashed on attempt 3" }]);
      // Reading dead letters does not consume them.
      expect(await queue.deadLetters()).toEqual(dead);
    });

    it("a message whose deliveries run out without delete or fail is dead-lettered as maxReceiveCount exceeded", async (context) => {
      const { transport } = await open(context, { maxReceiveCount: 2 });
      const queue = transport.queue("rollout-requests");
      const id = await queue.send("crashes its consumers");
      // Visibility 0: as if each consumer died at once and its timeout lapsed.
      expect((await queue.receive({ visibilityTimeoutSeconds: 0 }))[0]?.receiveCount).toBe(1);
      expect((await queue.receive({ visibilityTimeoutSeconds: 0 }))[0]?.receiveCount).toBe(2);
      expect(await queue.receive()).toEqual([]);
      const [dead] = await queue.deadLetters();
      expect(dead).toMatchObject({ id, body: "crashes its consumers", reason: MAX_RECEIVE_COUNT_EXCEEDED });
      expect(dead!.receiveCount).toBeGreaterThanOrEqual(2);
    });

    it("rejects invalid receive options and bodies with the failing field", async (context) => {
      const { transport } = await open(context);
      const queue = transport.queue("rollout-requests");
      await expect(queue.receive({ maxMessages: 11 })).rejects.toThrow(/maxMessages/);
      await expect(queue.receive({ waitSeconds: 21 })).rejects.toThrow(/waitSeconds/);
      await expect(queue.receive({ visibilityTimeoutSeconds: 1.5 })).rejects.toThrow(/visibilityTimeoutSeconds/);
      await expect(queue.send("")).rejects.toBeInstanceOf(ValidationError);
      await expect(queue.sendBatch(["ok", "x".repeat(300_000)])).rejects.toThrow(/message body \[1\]/);
      expect(await queue.approximateDepth()).toEqual({ visible: 0, inFlight: 0 });
    });
  });

  describe.concurrent("object store", () => {
    it("put, get, getText, head and delete; missing keys give undefined", async (context) => {
      const { transport } = await open(context);
      const store = transport.store("trajectories");
      expect(await store.get("nope")).toBeUndefined();
      expect(await store.getText("nope/deeper")).toBeUndefined();
      expect(await store.head("nope")).toBeUndefined();
      const before = Date.now();
      await store.put("exp/traj-1.json", '{"reward":1}');
      expect(await store.getText("exp/traj-1.json")).toBe('{"reward":1}');
      const info = await store.head("exp/traj-1.json");
      expect(info).toMatchObject({ key: "exp/traj-1.json", size: 12 });
      expect(info!.lastModified.getTime()).toBeGreaterThan(before - 5000);
      await store.put("exp/traj-1.json", "replaced");
      expect(await store.getText("exp/traj-1.json")).toBe("replaced");
      await store.delete("exp/traj-1.json");
      await store.delete("exp/traj-1.json");
      expect(await store.get("exp/traj-1.json")).toBeUndefined();
      expect(await store.get("exp")).toBeUndefined();
    });

    it("round-trips binary bodies byte for byte", async (context) => {
      const { transport } = await open(context);
      const store = transport.store("checkpoints");
      const bytes = new Uint8Array(70_000).map((_, i) => (i * 7) % 256);
      await store.put("policies/v1/weights.bin", bytes);
      expect(await store.get("policies/v1/weights.bin")).toEqual(bytes);
      expect(await store.head("policies/v1/weights.bin")).toMatchObject({ size: 70_000 });
    });

    it("keeps the two stores apart", async (context) => {
      const { transport } = await open(context);
      await transport.store("checkpoints").put("policies/v1/manifest.json", "{}");
      expect(await transport.store("trajectories").get("policies/v1/manifest.json")).toBeUndefined();
      expect(await transport.store("trajectories").list("")).toEqual([]);
    });

    it("putIfAbsent writes only the first time", async (context) => {
      const { transport } = await open(context);
      const store = transport.store("checkpoints");
      expect(await store.putIfAbsent("policies/v2/manifest.json", "first")).toBe(true);
      expect(await store.putIfAbsent("policies/v2/manifest.json", "second")).toBe(false);
      expect(await store.getText("policies/v2/manifest.json")).toBe("first");
    });

    it("concurrent putIfAbsent: one writer wins and its body is what stays", async (context) => {
      const { transport, another } = await open(context);
      const other = await another();
      const stores = [transport.store("checkpoints"), other.store("checkpoints")];
      const results = await Promise.all(
        Array.from({ length: 12 }, (_, i) => stores[i % 2]!.putIfAbsent("policies/v7/manifest.json", `writer-${i}`)),
      );
      const winners = results.flatMap((won, i) => (won ? [`writer-${i}`] : []));
      const stored = await stores[1]!.getText("policies/v7/manifest.json");
      if (target().atomicPutIfAbsent) expect(winners).toEqual([stored]);
      else expect(winners).toContain(stored);
    });

    it("lists keys under a prefix in lexicographic order", async (context) => {
      const { transport } = await open(context);
      const store = transport.store("trajectories");
      const keys = ["b/2", "a/10", "a/2", "a/1/x", "ab", "a-", "a/1/y/z", "c"];
      for (const key of keys) await store.put(key, key);
      const list = async (prefix: string) => (await store.list(prefix)).map((o) => o.key);
      expect(await list("a/")).toEqual(["a/1/x", "a/1/y/z", "a/10", "a/2"]);
      expect(await list("a/1")).toEqual(["a/1/x", "a/1/y/z", "a/10"]);
      expect(await list("a")).toEqual(["a-", "a/1/x", "a/1/y/z", "a/10", "a/2", "ab"]);
      expect(await list("")).toEqual([...keys].sort());
      expect(await list("zzz")).toEqual([]);
      expect(await list("a/1/y/")).toEqual(["a/1/y/z"]);
      const [first] = await store.list("b/");
      expect(first).toMatchObject({ key: "b/2", size: 3 });
    });

    it("rejects keys that could escape the store, naming the key", async (context) => {
      const { transport } = await open(context);
      const store = transport.store("trajectories");
      for (const key of ["", "../outside", "/etc/passwd", "a/../../b", "a//b", "a/./b", "trailing/", "back\\slash"]) {
        await expect(store.put(key, "x"), key).rejects.toBeInstanceOf(InvalidObjectKeyError);
        await expect(store.get(key), key).rejects.toBeInstanceOf(InvalidObjectKeyError);
      }
      await expect(store.putIfAbsent("../x", "x")).rejects.toThrow(/invalid object key "\.\.\/x"/);
      await expect(store.list("../")).rejects.toBeInstanceOf(InvalidObjectKeyError);
      await expect(store.delete("/abs")).rejects.toBeInstanceOf(InvalidObjectKeyError);
      expect(await store.list("")).toEqual([]);
    });
  });
}

/** Receives (and deletes) until `count` messages came or `timeoutMs` passed; returns what came. */
export async function drain(queue: Queue, count: number, timeoutMs = 20_000): Promise<ReceivedMessage[]> {
  const out: ReceivedMessage[] = [];
  const deadline = Date.now() + timeoutMs;
  while (out.length < count && Date.now() < deadline) {
    const batch = await queue.receive({ maxMessages: 10, waitSeconds: 1 });
    for (const message of batch) {
      out.push(message);
      await queue.delete(message.receiptHandle);
    }
  }
  return out;
}

/** Waits `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
