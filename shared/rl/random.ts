/**
 * Small seeded random sources shared by the feeder (task order) and the rollout worker
 * (cross-policy draws): deterministic by seed, independent of Math.random.
 */

/** A 32-bit string hash (FNV-1a), used to derive independent seeds from names. */
export function hashString(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * mulberry32: a fast generator with a 32-bit state; returns floats in [0, 1).
 * @example const random = seededRandom(42); random() // same sequence for seed 42 every time
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** A generator seeded from several parts (numbers or strings), e.g. `(seed, "db", pass)`. */
export function seededRandomFrom(...parts: ReadonlyArray<number | string>): () => number {
  return seededRandom(hashString(parts.map(String).join("\u0000")));
}

/** Fisher–Yates shuffle of a copy of `items` with the given random source. */
export function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}
