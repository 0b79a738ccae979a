import { describe, expect, it } from "vitest";
import { drawToken } from "../../shared/model/sampling.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import { CheckpointFollower, type PolicySource, targetVersion } from "../../trainer-image/policy-server/follower.ts";
import { waitFor } from "../env/helpers.ts";
import { ScriptedPolicy } from "./scripted.ts";

const logits = Float32Array.from([2, 1, 0.5, -1, 0]);

/** The policy server's use of drawToken: one uniform number from the seeded stream per non-greedy draw. */
class SeededRandom {
  readonly next: () => number;
  constructor(seed: number) {
    this.next = seededRandom(seed);
  }
}
function sampleToken(values: Float32Array, temperature: number, topP: number, rng: SeededRandom) {
  return drawToken(values, { temperature, topP, uniform: temperature > 0 ? rng.next() : 0 });
}
function logSoftmax(values: Float32Array, temperature: number): number[] {
  const scaled = [...values].map((v) => v / temperature);
  const max = Math.max(...scaled);
  const logZ = max + Math.log(scaled.reduce((s, v) => s + Math.exp(v - max), 0));
  return scaled.map((v) => v - logZ);
}

describe("sampling", () => {
  it("is reproducible from a seed and differs across seeds", () => {
    const draw = (seed: number) => {
      const rng = new SeededRandom(seed);
      return Array.from({ length: 50 }, () => sampleToken(logits, 1, 1, rng).token);
    };
    expect(draw(3)).toEqual(draw(3));
    expect(draw(3)).not.toEqual(draw(4));
  });

  it("reports log_softmax(logits / T) of the sampled token over the full vocabulary, even under top_p", () => {
    const rng = new SeededRandom(1);
    for (const [temperature, topP] of [
      [1, 1],
      [0.5, 1],
      [1.5, 0.6],
    ] as const) {
      const reference = logSoftmax(logits, temperature);
      for (let i = 0; i < 20; i++) {
        const { token, logprob } = sampleToken(logits, temperature, topP, rng);
        expect(logprob).toBeCloseTo(reference[token] as number, 6);
      }
    }
  });

  it("reports the sampled distribution's log-prob: the nucleus renormalized, the full one without, 0 when greedy", () => {
    const rng = new SeededRandom(3);
    // T=1, top_p 0.6 keeps tokens 0 and 1: their probabilities renormalized over that pair
    const p = logSoftmax(logits, 1).map(Math.exp);
    const nucleus = (p[0] as number) + (p[1] as number);
    for (let i = 0; i < 20; i++) {
      const { token, sampledLogprob } = sampleToken(logits, 1, 0.6, rng);
      expect(sampledLogprob).toBeCloseTo(Math.log((p[token] as number) / nucleus), 6);
    }
    const full = sampleToken(logits, 0.7, 1, rng);
    expect(full.sampledLogprob).toBe(full.logprob);
    expect(sampleToken(logits, 0, 1, rng).sampledLogprob).toBe(0);
  });

  it("keeps to the nucleus under top_p", () => {
    // Probabilities at T=1 are about [0.53, 0.19, 0.12, 0.03, 0.07]: top_p 0.6 keeps tokens 0 and 1.
    const rng = new SeededRandom(9);
    const seen = new Set(Array.from({ length: 300 }, () => sampleToken(logits, 1, 0.6, rng).token));
    expect([...seen].sort()).toEqual([0, 1]);
  });

  it("matches the distribution (frequencies within a few percent)", () => {
    const rng = new SeededRandom(11);
    const counts = new Array(logits.length).fill(0);
    const draws = 20_000;
    for (let i = 0; i < draws; i++) counts[sampleToken(logits, 1, 1, rng).token] += 1;
    const expected = logSoftmax(logits, 1).map(Math.exp);
    counts.forEach((count, j) => {
      expect(Math.abs(count / draws - (expected[j] as number))).toBeLessThan(0.015);
    });
  });

  it("is greedy at temperature 0 and reports the temperature-1 log-prob", () => {
    const { token, logprob } = sampleToken(logits, 0, 1, new SeededRandom(0));
    expect(token).toBe(0);
    expect(logprob).toBeCloseTo(logSoftmax(logits, 1)[0] as number, 6);
  });
});

describe("checkpoint follower", () => {
  it("maps the newest version to the pool's target", () => {
    expect(targetVersion("current", 7, 3)).toBe(7);
    expect(targetVersion("stale", 7, 3)).toBe(6);
    // only every 4th version is published (trainer.checkpointEvery 4): round down to one
    expect(targetVersion("stale", 13, 3, 4)).toBe(12);
    expect(targetVersion("stale", 11, 3, 4)).toBe(8);
    expect(targetVersion("current", 13, 3, 4)).toBe(13);
    expect(targetVersion("stale", 2, 3)).toBe(0);
  });

  it.each([
    ["current", [1, 2, 3, 4, 5, 6, 7]],
    ["stale", [3, 6]],
  ] as const)("pool %s installs the right versions as the store grows", async (pool, expected) => {
    let newest = 0;
    const source: PolicySource = {
      newestVersion: async () => newest,
      load: async (version) => new ScriptedPolicy(version, [], { vocabSize: 300, contextLength: 64, fallback: 0 }),
    };
    let served = 0;
    const installed: number[] = [];
    const follower = new CheckpointFollower(source, {
      pool,
      staleEvery: 3,
      pollSeconds: 1,
      currentVersion: () => served,
      install: async (policy) => {
        installed.push(policy.version);
        served = policy.version;
      },
    });
    for (newest = 0; newest <= 7; newest++) await follower.pollOnce();
    expect(installed).toEqual(expected);
    await follower.stop();
  });

  it("keeps polling after a failing store and never installs an older version", async () => {
    let calls = 0;
    const source: PolicySource = {
      newestVersion: async () => {
        calls += 1;
        if (calls === 1) throw new Error("store unavailable");
        return calls === 2 ? 5 : 4;
      },
      load: async (version) => new ScriptedPolicy(version, [], { vocabSize: 300, contextLength: 64, fallback: 0 }),
    };
    let served = 0;
    const follower = new CheckpointFollower(source, {
      pool: "current",
      staleEvery: 1,
      pollSeconds: 0.01,
      currentVersion: () => served,
      install: async (policy) => {
        served = policy.version;
      },
    });
    follower.start();
    await waitFor(() => calls >= 3, 10_000, "three polls of the store");
    await follower.stop();
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(served).toBe(5);
  });

  it("stops at once while a version is loading, and disposes that version instead of installing it", async () => {
    let release: (() => void) | undefined;
    const loaded = new ScriptedPolicy(1, [], { vocabSize: 300, contextLength: 64, fallback: 0 });
    const source: PolicySource = {
      newestVersion: async () => 1,
      // A store that answers only when the test says so (a hung S3 GET).
      load: (version) =>
        new Promise((resolve) => {
          expect(version).toBe(1);
          release = () => resolve(loaded);
        }),
    };
    const installed: number[] = [];
    const follower = new CheckpointFollower(source, {
      pool: "current",
      staleEvery: 1,
      pollSeconds: 60,
      currentVersion: () => 0,
      install: async (policy) => {
        installed.push(policy.version);
      },
    });
    const poll = follower.pollOnce();
    await waitFor(() => release !== undefined, 5_000, "the load to start");
    await follower.stop(); // would hang here if stop waited for the load
    release?.();
    expect(await poll).toBeUndefined();
    expect(installed).toEqual([]);
    expect(loaded.disposed).toBe(true);
  });

  it("waits on stop for an install under way, and settles when the server refuses it", async () => {
    let refuse: ((error: Error) => void) | undefined;
    const source: PolicySource = {
      newestVersion: async () => 2,
      load: async (version) => new ScriptedPolicy(version, [], { vocabSize: 300, contextLength: 64, fallback: 0 }),
    };
    const follower = new CheckpointFollower(source, {
      pool: "current",
      staleEvery: 1,
      pollSeconds: 60,
      currentVersion: () => 0,
      install: () =>
        new Promise<void>((_, reject) => {
          refuse = reject;
        }),
    });
    const poll = follower.pollOnce().catch((error: unknown) => error);
    await waitFor(() => refuse !== undefined, 5_000, "the install to start");
    let stopped = false;
    const stopping = follower.stop().then(() => {
      stopped = true;
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(stopped, "stop waits for the install").toBe(false);
    refuse?.(new Error("the scheduler is stopped"));
    await stopping;
    expect(((await poll) as Error).message).toBe("the scheduler is stopped");
  });
});
