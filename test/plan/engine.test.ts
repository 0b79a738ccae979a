import { describe, expect, it } from "vitest";
import type { DecodeProfile } from "../../shared/plan/calibration.ts";
import { Draws, Simulation, SlotPool, Station } from "../../shared/plan/engine.ts";
import { decodeRate } from "../../shared/plan/pipeline.ts";
import { seededRandom } from "../../shared/rl/random.ts";

describe("Simulation", () => {
  it("runs events in time order, ties in the order they were scheduled", () => {
    const sim = new Simulation();
    const seen: string[] = [];
    sim.after(2, () => seen.push(`b@${sim.now}`));
    sim.after(1, () => seen.push(`a@${sim.now}`));
    sim.after(2, () => seen.push(`c@${sim.now}`));
    sim.after(1, () => sim.after(0, () => seen.push(`d@${sim.now}`)));
    sim.run();
    expect(seen).toEqual(["a@1", "d@1", "b@2", "c@2"]);
    expect(sim.events).toBe(5);
  });

  it("stops at `until` and resumes from there", () => {
    const sim = new Simulation();
    const seen: number[] = [];
    for (const t of [1, 5, 9]) sim.after(t, () => seen.push(sim.now));
    sim.run(6);
    expect(seen).toEqual([1, 5]);
    expect(sim.now).toBe(6);
    sim.run();
    expect(seen).toEqual([1, 5, 9]);
  });

  it("refuses a negative delay, naming it", () => {
    expect(() => new Simulation().after(-1, () => {})).toThrow(/delay must be a number >= 0, got -1/);
  });
});

/** Poisson arrivals of `rate` into `station`, each with the service time `service()`. */
function feed(sim: Simulation, station: Station, rate: number, service: () => number, draws: Draws, jobs: number) {
  let sent = 0;
  const arrive = () => {
    station.submit(service(), () => {});
    sent += 1;
    if (sent < jobs) sim.after(draws.exponential(1 / rate), arrive);
  };
  sim.after(draws.exponential(1 / rate), arrive);
}

describe("Station against closed forms", () => {
  it("D/D/1: arrivals every 1 s, service 0.4 s: no waiting, utilisation 0.4", () => {
    const sim = new Simulation();
    const station = new Station(sim, 1);
    for (let i = 1; i <= 100; i++) sim.after(i, () => station.submit(0.4, () => {}));
    sim.run();
    // the last job leaves at 100.4; 100 jobs x 0.4 s busy = 40 s of 100.4
    expect(sim.now).toBeCloseTo(100.4, 12);
    expect(station.sojournTotal / station.completed).toBeCloseTo(0.4, 12);
    expect(station.utilisation()).toBeCloseTo(40 / 100.4, 12);
  });

  it("D/D/1 overloaded: service 1.5 s every 1 s, the n-th job leaves at 1 + 1.5n", () => {
    const sim = new Simulation();
    const station = new Station(sim, 1);
    const leaves: number[] = [];
    for (let i = 1; i <= 10; i++) sim.after(i, () => station.submit(1.5, () => leaves.push(sim.now)));
    sim.run();
    expect(leaves).toEqual(Array.from({ length: 10 }, (_, k) => 1 + 1.5 * (k + 1)));
  });

  it("M/M/1 at rho = 0.8: W = 1 / (mu - lambda) = 5 s, L = rho / (1 - rho) = 4, and L = lambda W (Little)", () => {
    const sim = new Simulation();
    const station = new Station(sim, 1);
    const draws = new Draws(seededRandom(3));
    const lambda = 0.8;
    const mu = 1;
    feed(sim, station, lambda, () => draws.exponential(1 / mu), draws, 200_000);
    sim.run();
    const W = station.sojournTotal / station.completed;
    const L = station.meanInSystem();
    const observedLambda = station.completed / sim.now;
    expect(Math.abs(W / 5 - 1)).toBeLessThan(0.05);
    expect(Math.abs(L / 4 - 1)).toBeLessThan(0.05);
    expect(Math.abs(station.utilisation() / 0.8 - 1)).toBeLessThan(0.02);
    // Little's law holds on the run itself, not only in expectation
    expect(Math.abs(L / (observedLambda * W) - 1)).toBeLessThan(0.01);
  });

  it("M/D/2: two servers halve the load of one (utilisation = lambda * s / c)", () => {
    const sim = new Simulation();
    const station = new Station(sim, 2);
    const draws = new Draws(seededRandom(5));
    feed(sim, station, 1, () => 1.2, draws, 50_000);
    sim.run();
    expect(Math.abs(station.utilisation() / 0.6 - 1)).toBeLessThan(0.03);
  });
});

describe("SlotPool", () => {
  it("never holds more than its capacity and serves waiters in order", () => {
    const sim = new Simulation();
    const pool = new SlotPool(sim, 2);
    const order: number[] = [];
    for (let i = 0; i < 5; i++)
      pool.acquire(() => {
        order.push(i);
        expect(pool.inUse).toBeLessThanOrEqual(2);
        sim.after(1, () => pool.release());
      });
    sim.run();
    expect(order).toEqual([0, 1, 2, 3, 4]);
    expect(pool.inUse).toBe(0);
    // 5 holds of 1 s over 3 s with 2 slots
    expect(pool.utilisation()).toBeCloseTo(5 / 6, 12);
  });
});

describe("decodeRate", () => {
  const profile = {
    tokPerSByConcurrency: [
      [1, 100],
      [9, 500],
    ],
    overheadMsPerCall: 0,
    instance: "x",
    serversPerInstance: 1,
    source: { kind: "assumption", ref: "test", date: "2026-12-03" },
  } satisfies DecodeProfile;

  it("interpolates between points and stays flat past the last", () => {
    expect(decodeRate(profile, 1)).toBe(100);
    // halfway from 1 to 9: 100 + (500 - 100) * 4 / 8 = 300
    expect(decodeRate(profile, 5)).toBe(300);
    expect(decodeRate(profile, 64)).toBe(500);
  });
});
