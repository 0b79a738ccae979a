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

/** One drill: `<s>\n<s>` in the codec's tokens, weight 1 on the second `<s>`'s tokens. */
export function copyDrill(codec: ChatCodec, random: () => number): { tokens: Int32Array; weights: Float32Array } {
  const length = DRILL_CHARACTERS.min + Math.floor(random() * (DRILL_CHARACTERS.max - DRILL_CHARACTERS.min + 1));
  const text = Array.from({ length }, () => CHARACTERS[Math.floor(random() * CHARACTERS.length)]).join("");
  const first = [...codec.encode(`${text}\n`)];
  const repeat = codec.encode(text);
  const weights = new Float32Array(first.length + repeat.length);
  weights.fill(1, first.length);
  return { tokens: Int32Array.from([...first, ...repeat]), weights };
}
