import { describe, expect, it } from "vitest";
import {
  broadcastToTokens,
  computeAdvantages,
  grpoAdvantages,
  mean,
  normalizeByTask,
  reinforcePlusPlusAdvantages,
  rlooAdvantages,
  std,
  uniformGroups,
} from "../../shared/rl/index.ts";

describe("GRPO advantages", () => {
  it("hand-worked group of three", () => {
    // rewards 1, 0, 0.5: mean 0.5; sample std = sqrt((0.25 + 0.25 + 0) / 2) = 0.5
    // A = (1 - 0.5) / (0.5 + 1e-6) = 0.999998, then -0.999998, then 0
    const a = grpoAdvantages([1, 0, 0.5], ["g", "g", "g"]);
    expect(a[0]).toBeCloseTo(0.5 / 0.500001, 12);
    expect(a[1]).toBeCloseTo(-0.5 / 0.500001, 12);
    expect(a[2]).toBe(0);
  });

  it("groups are independent and members need not be adjacent", () => {
    // g1 = {r0=1, r2=0}: mean 0.5, sample std sqrt(0.5) = 0.70711 -> ±0.70711
    // g2 = {r1=3, r3=3}: std 0 -> both 0
    const a = grpoAdvantages([1, 3, 0, 3], ["g1", "g2", "g1", "g2"]);
    expect(a[0]).toBeCloseTo(0.5 / (Math.SQRT1_2 + 1e-6), 10);
    expect(a[2]).toBeCloseTo(-0.5 / (Math.SQRT1_2 + 1e-6), 10);
    expect([a[1], a[3]]).toEqual([0, 0]);
  });

  it("a group of one gets 0", () => {
    expect(grpoAdvantages([5], ["alone"])).toEqual([0]);
  });

  it("invariant: every group's advantages have zero mean, and a zero-std group gives 0, never NaN", () => {
    let seed = 7;
    const random = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
      return seed / 2_147_483_648;
    };
    const rewards: number[] = [];
    const groups: string[] = [];
    for (let g = 0; g < 20; g++) {
      const constant = g % 5 === 0;
      for (let i = 0; i < 8; i++) {
        rewards.push(constant ? -0.2 : Math.round(random() * 4) / 4);
        groups.push(`g${g}`);
      }
    }
    const a = grpoAdvantages(rewards, groups);
    expect(a.every(Number.isFinite)).toBe(true);
    for (let g = 0; g < 20; g++) {
      const members = a.slice(g * 8, g * 8 + 8);
      expect(Math.abs(mean(members))).toBeLessThan(1e-9);
      if (g % 5 === 0) expect(members.every((x) => x === 0)).toBe(true);
    }
  });

  it("rejects misaligned inputs", () => {
    expect(() => grpoAdvantages([1, 2], ["g"])).toThrow(/lengths differ/);
  });
});

describe("RLOO advantages", () => {
  it("hand-worked: reward minus the mean of the others", () => {
    // [1, 0, 0]: 1 - (0+0)/2 = 1; 0 - (1+0)/2 = -0.5 (twice)
    expect(rlooAdvantages([1, 0, 0], ["g", "g", "g"])).toEqual([1, -0.5, -0.5]);
    // equals n/(n-1) * (r - mean): 3/2 * (1 - 1/3) = 1
  });

  it("zero mean per group; a group of one gets 0", () => {
    const a = rlooAdvantages([0.3, 0.9, -0.2, 0.4, 7], ["a", "a", "a", "a", "solo"]);
    expect(Math.abs(mean(a.slice(0, 4)))).toBeLessThan(1e-12);
    expect(a[4]).toBe(0);
  });
});

describe("uniform groups (DAPO's dynamic-sampling filter)", () => {
  it("finds the groups whose members all got one reward, whose GRPO and RLOO advantages are all 0", () => {
    const rewards = [1, 1, 0, 1, -0.2, -0.2, 0.5];
    const groups = ["a", "a", "b", "b", "c", "c", "solo"];
    const uniform = uniformGroups(rewards, groups);
    expect([...uniform].sort()).toEqual(["a", "c", "solo"]);
    const grpo = grpoAdvantages(rewards, groups);
    const rloo = rlooAdvantages(rewards, groups);
    groups.forEach((g, i) => {
      if (!uniform.has(g)) return;
      expect(grpo[i]).toBe(0);
      expect(rloo[i]).toBe(0);
    });
    expect(grpo[2]).not.toBe(0);
  });

  it("rejects misaligned inputs", () => {
    expect(() => uniformGroups([1], ["a", "b"])).toThrow(/lengths differ/);
  });
});

describe("REINFORCE++ advantages", () => {
  it("hand-worked: token-weighted batch whitening with population std", () => {
    // rewards 1 (3 tokens), 0 (1 token): token mean = 3/4 = 0.75
    // population var over 4 tokens = (3 * 0.0625 + 0.5625) / 4 = 0.1875, std = 0.4330127
    // A = 0.25 / 0.4330137 = 0.577349..., and -0.75 / 0.4330137 = -1.732048...
    const a = reinforcePlusPlusAdvantages([1, 0], [3, 1]);
    const s = Math.sqrt(0.1875) + 1e-6;
    expect(a[0]).toBeCloseTo(0.25 / s, 12);
    expect(a[1]).toBeCloseTo(-0.75 / s, 12);
  });

  it("ignores groups (no group baseline) and is finite for an all-equal batch", () => {
    expect(reinforcePlusPlusAdvantages([1, 1, 1], [2, 5, 1])).toEqual([0, 0, 0]);
    expect(reinforcePlusPlusAdvantages([1], [0])).toEqual([0]);
  });

  it("computeAdvantages dispatches on the estimator name", () => {
    const inputs = { rewards: [1, 0], groupIds: ["g", "g"], lossTokens: [1, 1] };
    expect(computeAdvantages("rloo", inputs)).toEqual([1, -1]);
    expect(computeAdvantages("grpo", inputs)[0]).toBeCloseTo(0.5 / (Math.SQRT1_2 + 1e-6), 10);
    expect(computeAdvantages("reinforce++", inputs)[0]).toBeCloseTo(0.5 / 0.500001, 10);
  });
});

describe("broadcast and task normalization", () => {
  it("broadcasts only onto loss-masked tokens", () => {
    expect(
      broadcastToTokens(
        [2, -1],
        [
          [0, 1, 1],
          [1, 0, 1],
        ],
      ),
    ).toEqual([
      [0, 2, 2],
      [-1, 0, -1],
    ]);
  });

  it("hand-worked: population std per task over masked tokens", () => {
    // task db masked tokens: 1, 1, -1 -> mean 1/3; population var = (2 * (2/3)² + (4/3)²) / 3 = 8/9
    // std = 0.942809; A' = (1 - 1/3) / (0.942809 + 1e-6) = 0.707106..., (-1 - 1/3) / ... = -1.414213...
    // task kg: one masked token 5 -> mean 5, std 0 -> (5 - 5) / 1e-6 = 0
    const out = normalizeByTask(
      [
        [1, 1],
        [-1, 9],
        [5, 0],
      ],
      [
        [1, 1],
        [1, 0],
        [1, 0],
      ],
      ["db", "db", "kg"],
    );
    const s = Math.sqrt(8 / 9) + 1e-6;
    expect(out[0]?.[0]).toBeCloseTo(2 / 3 / s, 12);
    expect(out[1]?.[0]).toBeCloseTo(-4 / 3 / s, 12);
    expect(out[1]?.[1]).toBe(0); // unmasked stays 0 even though its input was 9
    expect(out[2]).toEqual([0, 0]);
  });

  it("invariant: each task's masked tokens end with mean 0 and population std ≈ 1", () => {
    const adv = [
      [0.5, 0.5, 0.5],
      [-2, -2, 0],
      [3, 1, 1],
      [0, 0, 0.25],
    ];
    const mask = [
      [1, 1, 0],
      [1, 1, 1],
      [1, 0, 1],
      [0, 1, 1],
    ];
    const tasks = ["os", "os", "webshop", "webshop"];
    const out = normalizeByTask(adv, mask, tasks);
    for (const task of ["os", "webshop"]) {
      const values = out.flatMap((row, b) => (tasks[b] === task ? row.filter((_, t) => mask[b]?.[t]) : []));
      expect(Math.abs(mean(values))).toBeLessThan(1e-9);
      expect(std(values, "population")).toBeCloseTo(1, 5);
    }
  });
});
