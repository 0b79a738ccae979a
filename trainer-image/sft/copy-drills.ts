import type { ChatCodec } from "../../shared/chat/index.ts";

/**
 * Copy drills: synthetic sequences that only copying can predict, a random string of letters and
 * digits, a newline, and the same string again, with the loss on the repeat. A webshop warm-up
 * never learned to copy a product id off its page (every character after the shared `B0` cost
 * ln 34, a guess: `npm run bench:copy -- <dir> --n 0 --ids`). Copying needs a lookup: attend to
 * where the current token occurred before, take the token after it. Drills are the densest, purest
 * signal for it, where clicks in long traces are sparse; the strings' lengths vary so the repeat
 * cannot be copied from a fixed distance back. Whether and when the lookup forms is measured by the
 * same probe's drill loss (docs/learning.md).
 */

const CHARACTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
/** Length range of a drill's string, in characters. */
export const DRILL_CHARACTERS = { min: 8, max: 32 } as const;

/** A string of `min` to `max` characters drawn from `characters`. */
function draw(random: () => number, characters: string, min: number, max: number): string {
  const length = min + Math.floor(random() * (max - min + 1));
  return Array.from({ length }, () => characters[Math.floor(random() * characters.length)]).join("");
}

/** One of `items`. */
function pick<T>(random: () => number, items: readonly T[]): T {
  return items[Math.floor(random() * items.length)] as T;
}

/** One drill: `<s>\n<s>` in the codec's tokens, weight 1 on the second `<s>`'s tokens. */
export function copyDrill(codec: ChatCodec, random: () => number): { tokens: Int32Array; weights: Float32Array } {
  return repeated(codec, draw(random, CHARACTERS, DRILL_CHARACTERS.min, DRILL_CHARACTERS.max));
}

/** `context` then `target` in the codec's tokens (encoded apart), weight 1 on the target's tokens. */
function scored(codec: ChatCodec, context: string, target: string): { tokens: Int32Array; weights: Float32Array } {
  const before = codec.encode(context);
  const after = codec.encode(target);
  const weights = new Float32Array(before.length + after.length);
  weights.fill(1, before.length);
  return { tokens: Int32Array.from([...before, ...after]), weights };
}

/** `<text>\n<text>`, weight 1 on the repeat's tokens. */
function repeated(codec: ChatCodec, text: string): { tokens: Int32Array; weights: Float32Array } {
  return scored(codec, `${text}\n`, text);
}

/**
 * Recall drills: which span to copy, where a copy drill teaches how to go on copying one. A db
 * policy with the lookup in place still misspells the first token of what it copies from the
 * question (`salary > 8655` written `salary > 1655`: the tokens after the first follow the
 * question, the first follows the data's prior), because its choice of span is matched by
 * content, not by a fixed distance. A drill lists a few `key is value` pairs, then asks one key
 * again, the loss on its value's tokens (the first included): only finding the key and copying
 * what follows it predicts them. Values are numbers or letter words, each after a space, as a
 * question's numbers and names are; the listing's and the question's separators differ, as a
 * question's words differ from a query's.
 */
const LOWER = "abcdefghijklmnopqrstuvwxyz";
const LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/** Pairs a recall drill lists. */
export const RECALL_PAIRS = { min: 2, max: 6 } as const;
const LIST_SEPARATORS = ["is", "=", ":", "of"] as const;
const ASK_SEPARATORS = [":", "=", "->", ">"] as const;

/** A number of one to five digits, its first not zero, or a word of three to ten letters. */
function recallValue(random: () => number): string {
  if (random() < 0.5) return draw(random, LETTERS, 3, 10);
  return `${1 + Math.floor(random() * 9)}${draw(random, "0123456789", 0, 4)}`;
}

/** One recall drill: `k1 is v1, k2 is v2, …\nkj: vj`, weight 1 on the asked value's tokens. */
export function recallDrill(
  codec: ChatCodec,
  random: () => number,
): { tokens: Int32Array; weights: Float32Array; key: string; value: string } {
  const pairs = RECALL_PAIRS.min + Math.floor(random() * (RECALL_PAIRS.max - RECALL_PAIRS.min + 1));
  const keys = new Set<string>();
  while (keys.size < pairs) keys.add(draw(random, LOWER, 3, 6));
  const entries = [...keys].map((key) => ({ key, value: recallValue(random) }));
  const listed = pick(random, LIST_SEPARATORS);
  const asked = pick(random, entries);
  const listing = entries.map((e) => `${e.key} ${listed} ${e.value}`).join(", ");
  const drill = scored(codec, `${listing}\n${asked.key} ${pick(random, ASK_SEPARATORS)}`, ` ${asked.value}`);
  return { ...drill, key: asked.key, value: asked.value };
}

/**
 * Path drills: copying on where one token is followed by different tokens at its occurrences. An
 * os policy that copies `/etc/sshd/sshd.conf` writes `/etc/sshd/sshd/sshd.conf`: after the second
 * `sshd` its lookup takes what followed the first. A drill is a path of a few segments drawn from
 * fewer words (so a word recurs, each time followed by something else), a newline and the path
 * again, the loss on the repeat: only keeping track of which occurrence is being copied predicts it.
 */
export function pathDrill(codec: ChatCodec, random: () => number): { tokens: Int32Array; weights: Float32Array } {
  const words = new Set<string>();
  const wordCount = 2 + Math.floor(random() * 2);
  while (words.size < wordCount) words.add(draw(random, LOWER, 2, 7));
  const pool = [...words];
  const segments = Array.from({ length: wordCount + 1 + Math.floor(random() * 3) }, () => pick(random, pool));
  return repeated(codec, `/${segments.join("/")}${random() < 0.5 ? `.${pick(random, pool)}` : ""}`);
}
