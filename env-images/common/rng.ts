/**
 * Small seeded PRNG helpers shared by every task generator and baseline. Every instance is a pure
 * function of (task, index), so the same index always yields the same database, graph or catalogue
 * on every worker and in every test.
 */
import { hashString, seededRandom } from "../../shared/rl/random.ts";

/** 32-bit FNV-1a hash of a string; the seed source for `rngFor` (the project's one implementation). */
export { hashString };

/** A deterministic random source (mulberry32) with the few draws the generators need. */
export class Rng {
  private readonly draw: () => number;

  constructor(seed: number) {
    this.draw = seededRandom(seed);
  }

  /** Uniform float in [0, 1). */
  next(): number {
    return this.draw();
  }

  /** Uniform integer in [min, max] (both inclusive). */
  int(min: number, max: number): number {
    return min + Math.floor(this.next() * (max - min + 1));
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.next() < p;
  }

  /** One element of a non-empty array. */
  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error("Rng.pick: empty array");
    return items[Math.floor(this.next() * items.length)] as T;
  }

  /** A shuffled copy (Fisher-Yates). */
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [out[i], out[j]] = [out[j] as T, out[i] as T];
    }
    return out;
  }

  /** `count` distinct elements, in random order. */
  sample<T>(items: readonly T[], count: number): T[] {
    return this.shuffle(items).slice(0, count);
  }

  /** Index drawn with probability proportional to `weights`. */
  weighted(weights: readonly number[]): number {
    const total = weights.reduce((a, b) => a + b, 0);
    let r = this.next() * total;
    for (let i = 0; i < weights.length; i++) {
      r -= weights[i] as number;
      if (r < 0) return i;
    }
    return weights.length - 1;
  }
}

/** The random source of instance `index` of `task` (independent streams per `purpose`). */
export function rngFor(task: string, index: number, purpose = "instance"): Rng {
  return new Rng(hashString(`${task}:${purpose}:${index}`));
}

const CONSONANTS = ["b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z"];
const VOWELS = ["a", "e", "i", "o", "u"];

/** A pronounceable capitalised made-up word of `syllables` syllables ("Tavo", "Mirelan"). */
export function madeUpWord(rng: Rng, syllables: number): string {
  let word = "";
  for (let i = 0; i < syllables; i++) word += rng.pick(CONSONANTS) + rng.pick(VOWELS);
  if (rng.chance(0.5)) word += rng.pick(["n", "r", "s", "l"]);
  return word.charAt(0).toUpperCase() + word.slice(1);
}

/** `count` distinct made-up words. */
export function distinctWords(
  rng: Rng,
  count: number,
  syllables: number,
  avoid: ReadonlySet<string> = new Set(),
): string[] {
  const seen = new Set(avoid);
  const out: string[] = [];
  while (out.length < count) {
    const word = madeUpWord(rng, syllables);
    if (seen.has(word)) continue;
    seen.add(word);
    out.push(word);
  }
  return out;
}
