/**
 * Advantage estimators on plain arrays (float64). They are the reference the trainer uses and the
 * tensor code is checked against. Conventions follow agentrl-reference.md section 4 and
 * ../shared/vectors/rl-math.json:
 *
 * - GRPO: per group, `A = (r - mean) / (std + eps)` with the *sample* std (n - 1, as torch.std);
 *   a group of one gets `A = 0` (there is nothing to compare it with).
 * - RLOO: per group, `A_i = r_i - mean(r_j, j != i) = n / (n - 1) * (r_i - mean)`; a group of one gets 0.
 * - REINFORCE++ (outcome reward, gamma = 1, KL kept in the loss rather than in the reward): every
 *   loss token of a trajectory has return `r`, and the returns are whitened over all loss-masked
 *   tokens of the batch: `A = (r - mean_tok) / (std_tok + eps)`, where mean and the *population* std
 *   are weighted by each trajectory's loss-token count. No group baseline.
 *
 * Then {@link broadcastToTokens} puts each trajectory's advantage on its loss-masked tokens, and
 * {@link normalizeByTask} applies task advantage normalization (reference section 1.4).
 */

/** The default epsilon added to every std in a normalization (reference: 1e-6). */
export const DEFAULT_ADVANTAGE_EPS = 1e-6;

/** Advantage estimators the trainer can use (`trainer.estimator`). */
export type Estimator = "grpo" | "rloo" | "reinforce++";

function groupIndices(groupIds: readonly string[]): Map<string, number[]> {
  const groups = new Map<string, number[]>();
  groupIds.forEach((id, i) => {
    const members = groups.get(id);
    if (members) members.push(i);
    else groups.set(id, [i]);
  });
  return groups;
}

function checkSameLength(a: readonly unknown[], b: readonly unknown[], what: string): void {
  if (a.length !== b.length) throw new RangeError(`${what}: lengths differ (${a.length} vs ${b.length})`);
}

/**
 * Arithmetic mean; 0 for an empty list. Summed as offsets from the first value, so a list of
 * equal values has exactly that mean (a constant group then gets advantages of exactly 0,
 * not ±1e-11 from rounding divided by eps).
 */
export function mean(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const first = values[0] as number;
  let offset = 0;
  for (const v of values) offset += v - first;
  return first + offset / values.length;
}

/**
 * Standard deviation. `sample` divides by n - 1 (torch.std), otherwise by n (population).
 * Lists too short for the chosen divisor give 0.
 */
export function std(values: readonly number[], kind: "sample" | "population"): number {
  const divisor = kind === "sample" ? values.length - 1 : values.length;
  if (divisor <= 0) return 0;
  const m = mean(values);
  let sq = 0;
  for (const v of values) sq += (v - m) * (v - m);
  return Math.sqrt(sq / divisor);
}

/**
 * GRPO advantages, one per trajectory.
 * @example grpoAdvantages([1, 1, 0, 0], ["g", "g", "g", "g"]) // ≈ [0.866, 0.866, -0.866, -0.866]
 */
export function grpoAdvantages(
  rewards: readonly number[],
  groupIds: readonly string[],
  eps = DEFAULT_ADVANTAGE_EPS,
): number[] {
  checkSameLength(rewards, groupIds, "grpoAdvantages");
  const out = new Array<number>(rewards.length).fill(0);
  for (const members of groupIndices(groupIds).values()) {
    if (members.length < 2) continue;
    const r = members.map((i) => rewards[i] as number);
    const m = mean(r);
    const s = std(r, "sample");
    for (const i of members) out[i] = ((rewards[i] as number) - m) / (s + eps);
  }
  return out;
}

/**
 * RLOO advantages: each reward minus the mean of the other rewards of its group.
 * @example rlooAdvantages([1, 0, 0], ["g", "g", "g"]) // [1, -0.5, -0.5]
 */
export function rlooAdvantages(rewards: readonly number[], groupIds: readonly string[]): number[] {
  checkSameLength(rewards, groupIds, "rlooAdvantages");
  const out = new Array<number>(rewards.length).fill(0);
  for (const members of groupIndices(groupIds).values()) {
    const n = members.length;
    if (n < 2) continue;
    let total = 0;
    for (const i of members) total += rewards[i] as number;
    for (const i of members) {
      const r = rewards[i] as number;
      out[i] = r - (total - r) / (n - 1);
    }
  }
  return out;
}

/**
 * REINFORCE++ advantages (see the module comment for the exact formula): batch whitening of the
 * outcome reward, weighted by loss-token counts, population std.
 * @example reinforcePlusPlusAdvantages([1, 0], [1, 1]) // ≈ [1, -1]
 */
export function reinforcePlusPlusAdvantages(
  rewards: readonly number[],
  lossTokens: readonly number[],
  eps = DEFAULT_ADVANTAGE_EPS,
): number[] {
  checkSameLength(rewards, lossTokens, "reinforcePlusPlusAdvantages");
  let count = 0;
  let sum = 0;
  rewards.forEach((r, i) => {
    const w = lossTokens[i] as number;
    count += w;
    sum += w * r;
  });
  if (count === 0) return rewards.map(() => 0);
  const m = sum / count;
  let sq = 0;
  rewards.forEach((r, i) => {
    sq += (lossTokens[i] as number) * (r - m) * (r - m);
  });
  const s = Math.sqrt(sq / count);
  return rewards.map((r) => (r - m) / (s + eps));
}

/**
 * Groups whose members all got the same reward: under a group baseline (GRPO, RLOO) every member's
 * advantage is 0, so they carry no policy-gradient signal.
 * @example uniformGroups([1, 1, 0, 1], ["a", "a", "b", "b"]) // Set {"a"}
 */
export function uniformGroups(rewards: readonly number[], groupIds: readonly string[]): Set<string> {
  checkSameLength(rewards, groupIds, "uniformGroups");
  const first = new Map<string, number>();
  const mixed = new Set<string>();
  groupIds.forEach((g, i) => {
    const r = rewards[i] as number;
    if (!first.has(g)) first.set(g, r);
    else if (first.get(g) !== r) mixed.add(g);
  });
  return new Set([...first.keys()].filter((g) => !mixed.has(g)));
}

/** Inputs of {@link computeAdvantages}. */
export interface AdvantageInputs {
  readonly rewards: readonly number[];
  readonly groupIds: readonly string[];
  /** Loss-masked token count of each trajectory (only REINFORCE++ reads it). */
  readonly lossTokens: readonly number[];
}

/** Trajectory-level advantages with the chosen estimator. */
export function computeAdvantages(
  estimator: Estimator,
  inputs: AdvantageInputs,
  eps = DEFAULT_ADVANTAGE_EPS,
): number[] {
  switch (estimator) {
    case "grpo":
      return grpoAdvantages(inputs.rewards, inputs.groupIds, eps);
    case "rloo":
      return rlooAdvantages(inputs.rewards, inputs.groupIds);
    case "reinforce++":
      return reinforcePlusPlusAdvantages(inputs.rewards, inputs.lossTokens, eps);
  }
}

/**
 * Puts each trajectory's advantage on its loss-masked tokens; 0 elsewhere.
 * @example broadcastToTokens([2], [[0, 1, 1]]) // [[0, 2, 2]]
 */
export function broadcastToTokens(
  advantages: readonly number[],
  lossMask: ReadonlyArray<ArrayLike<number>>,
): number[][] {
  checkSameLength(advantages, lossMask as readonly unknown[], "broadcastToTokens");
  return lossMask.map((mask, i) => Array.from(mask, (m) => (m ? (advantages[i] as number) : 0)));
}

/**
 * Task advantage normalization: per task, over every loss-masked token advantage of that task in
 * the batch, `A' = (A - mean) / (std + eps)` with the population std; unmasked tokens stay 0.
 * @example normalizeByTask([[1, 1], [-1, 0]], [[1, 1], [1, 0]], ["db", "db"]) // mean 1/3, std 0.943
 */
export function normalizeByTask(
  tokenAdvantages: ReadonlyArray<ArrayLike<number>>,
  lossMask: ReadonlyArray<ArrayLike<number>>,
  tasks: readonly string[],
  eps = DEFAULT_ADVANTAGE_EPS,
): number[][] {
  checkSameLength(tokenAdvantages as readonly unknown[], tasks, "normalizeByTask");
  checkSameLength(lossMask as readonly unknown[], tasks, "normalizeByTask");
  const stats = new Map<string, { count: number; sum: number; sq: number }>();
  tasks.forEach((task, i) => {
    const entry = stats.get(task) ?? { count: 0, sum: 0, sq: 0 };
    const adv = tokenAdvantages[i] as ArrayLike<number>;
    const mask = lossMask[i] as ArrayLike<number>;
    for (let t = 0; t < mask.length; t++) {
      if (!mask[t]) continue;
      entry.count += 1;
      entry.sum += adv[t] as number;
    }
    stats.set(task, entry);
  });
  // second pass for the variance around the mean (numerically safer than E[x²] - E[x]²)
  tasks.forEach((task, i) => {
    const entry = stats.get(task)!;
    const m = entry.count ? entry.sum / entry.count : 0;
    const adv = tokenAdvantages[i] as ArrayLike<number>;
    const mask = lossMask[i] as ArrayLike<number>;
    for (let t = 0; t < mask.length; t++) if (mask[t]) entry.sq += ((adv[t] as number) - m) ** 2;
  });
  return tasks.map((task, i) => {
    const entry = stats.get(task)!;
    const m = entry.count ? entry.sum / entry.count : 0;
    const s = entry.count ? Math.sqrt(entry.sq / entry.count) : 0;
    const adv = tokenAdvantages[i] as ArrayLike<number>;
    const mask = lossMask[i] as ArrayLike<number>;
    return Array.from({ length: mask.length }, (_, t) => (mask[t] ? ((adv[t] as number) - m) / (s + eps) : 0));
  });
}
