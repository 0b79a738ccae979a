import { afterEach, describe, expect, it, vi } from "vitest";
import { IdlePool } from "../../shared/env/idlePool.ts";

interface Item {
  readonly name: string;
  alive: boolean;
}

function poolOf(maxIdle: number, idleMs = 1_000) {
  const discarded: string[] = [];
  const pool = new IdlePool<Item>({
    maxIdle,
    idleMs,
    isAlive: (item) => item.alive,
    discard: (item) => discarded.push(item.name),
  });
  return { pool, discarded };
}

const item = (name: string): Item => ({ name, alive: true });

describe("IdlePool", () => {
  afterEach(() => vi.useRealTimers());

  it("keeps every item returned up to maxIdle and hands back the newest first", () => {
    const { pool, discarded } = poolOf(3);
    for (const name of ["a", "b", "c", "d"]) pool.put(item(name));
    expect(pool.size).toBe(3);
    expect(discarded).toEqual(["d"]);
    expect([pool.take()?.name, pool.take()?.name, pool.take()?.name, pool.take()]).toEqual(["c", "b", "a", undefined]);
  });

  it("never keeps or hands out a dead item, and discards it", () => {
    const { pool, discarded } = poolOf(4);
    const a = item("a");
    pool.put({ name: "dead", alive: false });
    pool.put(a);
    pool.put(item("b"));
    a.alive = false;
    expect(pool.take()?.name).toBe("b");
    expect(pool.take()).toBeUndefined();
    expect(discarded).toEqual(["dead", "a"]);
  });

  it("discards what stays unused for idleMs, oldest first, and keeps what was used since", () => {
    vi.useFakeTimers();
    const { pool, discarded } = poolOf(8, 1_000);
    pool.put(item("a"));
    vi.advanceTimersByTime(600);
    pool.put(item("b"));
    vi.advanceTimersByTime(500); // a is 1.1 s idle, b 0.5 s
    expect(discarded).toEqual(["a"]);
    expect(pool.size).toBe(1);
    const b = pool.take()!;
    vi.advanceTimersByTime(5_000);
    expect(discarded).toEqual(["a"]); // b was in use
    pool.put(b);
    vi.advanceTimersByTime(999);
    expect(pool.size).toBe(1);
    vi.advanceTimersByTime(1);
    expect(discarded).toEqual(["a", "b"]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("drain discards everything kept and stops its timer", () => {
    vi.useFakeTimers();
    const { pool, discarded } = poolOf(8);
    pool.put(item("a"));
    pool.put(item("b"));
    pool.drain();
    expect(discarded).toEqual(["a", "b"]);
    expect(pool.size).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("refuses a cap or an idle time that is not one", () => {
    expect(() => poolOf(-1)).toThrow(/maxIdle must be a whole number/);
    expect(() => poolOf(1.5)).toThrow(/maxIdle must be a whole number/);
    expect(() => poolOf(1, 0)).toThrow(/idleMs must be > 0/);
  });
});
