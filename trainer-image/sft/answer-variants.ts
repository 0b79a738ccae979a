import type { ChatMessage } from "../../shared/protocol/openai.ts";

/**
 * Answer-resampled copies of expert traces, to teach copying. In an expert episode the committed
 * answer is copied from the observation just before it (a query result, a command's output), but
 * a model can also lower its loss by guessing the value from the question, and at this scale it
 * learns to guess. A variant replaces every answer value that stands on a line of its own in that
 * observation with a fresh value of the same kind, in the observation and in the answer alike,
 * so only copying predicts it. Task-agnostic: it reads the final tool call's string and integer arguments.
 *
 * Integers get fresh digits. Words get, by `WordResample`, another answer of the task (`pool`), or
 * a fresh word recombined from the syllables of the task's answers (`recombine`). With `pool`, a
 * model can still learn the pool's words whole and answer a memorized one once it saw its first
 * piece (measured: a made-up name's third piece at 12 nats); a recombined word is made of the
 * same pieces but is new as a whole, so each piece must be copied, as digits are.
 */

/** How a word answer is resampled: another answer of the task, or a new word of its syllables. */
export type WordResample = "pool" | "recombine";

const SYLLABLE = /[^aeiouy]*[aeiouy]+/gi;
const CODA = /[^aeiouy]+$/i;

/** The pieces words are recombined from: syllables (consonants then vowels) and word-final consonants. */
export interface Syllables {
  readonly syllables: readonly string[];
  readonly codas: readonly string[];
}

/** Distinct lower-case syllables and word-final consonant runs of the letter runs in `words`. */
export function syllablesOf(words: readonly string[]): Syllables {
  const syllables = new Set<string>();
  const codas = new Set<string>();
  for (const word of words)
    for (const run of word.match(/[A-Za-z]+/g) ?? []) {
      for (const piece of run.match(SYLLABLE) ?? []) syllables.add(piece.toLowerCase());
      const coda = CODA.exec(run)?.[0];
      if (coda && coda.length < run.length) codas.add(coda.toLowerCase());
    }
  return { syllables: [...syllables], codas: [...codas] };
}

/**
 * `value` with every letter run replaced by a new word of as many random syllables (and a final
 * consonant run where it had one), its case kept (capitalized, all capitals or lower case), and
 * every digit run by random digits of its length; other characters stay. Undefined when there
 * are no syllables to draw from.
 */
export function recombineValue(value: string, pieces: Syllables, random: () => number): string | undefined {
  const { syllables, codas } = pieces;
  if (syllables.length === 0) return undefined;
  const pick = (from: readonly string[]) => from[Math.floor(random() * from.length)] as string;
  return value.replace(/[A-Za-z]+|\d+/g, (run) => {
    if (isIntegerText(run)) return resampleValue(run, [], random) as string;
    const count = Math.max(1, (run.match(SYLLABLE) ?? []).length);
    const coda = CODA.test(run) && codas.length > 0 && count < run.length ? pick(codas) : "";
    const word = Array.from({ length: count }, () => pick(syllables)).join("") + coda;
    if (run.length > 1 && run === run.toUpperCase()) return word.toUpperCase();
    return run[0] === run[0]?.toUpperCase() ? (word[0]?.toUpperCase() ?? "") + word.slice(1) : word;
  });
}

/** Whether an answer value is a non-negative integer (resampled as digits, not drawn from the task's answers). */
export function isIntegerText(value: string): boolean {
  return /^\d+$/.test(value);
}

/** Indices of the last assistant turn (the answer) and of the tool response before it (-1 when absent). */
function answerTurn(messages: readonly ChatMessage[]): { answer: number; observation: number } {
  const roles = messages.map((m) => m.role);
  const answer = roles.lastIndexOf("assistant");
  return { answer, observation: answer < 0 ? -1 : roles.slice(0, answer).lastIndexOf("tool") };
}

/** A fresh stand-in for `value`: same-length digits for an integer, else another task's answer from `pool`. */
export function resampleValue(value: string, pool: readonly string[], random: () => number): string | undefined {
  if (isIntegerText(value)) {
    const digit = () => String(Math.floor(random() * 10));
    if (value.length === 1) return digit();
    return String(1 + Math.floor(random() * 9)) + Array.from({ length: value.length - 1 }, digit).join("");
  }
  const others = pool.filter((p) => p !== value);
  return others.length === 0 ? undefined : others[Math.floor(random() * others.length)];
}

/** The string and integer values among a tool call's JSON arguments (top level and inside arrays), as text. */
export function answerArguments(argumentsJson: string): string[] {
  let parsed: unknown;
  try {
    parsed = JSON.parse(argumentsJson);
  } catch {
    return [];
  }
  if (typeof parsed !== "object" || parsed === null) return [];
  const text = (v: unknown): string[] =>
    typeof v === "string" ? [v] : Number.isSafeInteger(v) && (v as number) >= 0 ? [String(v)] : [];
  return Object.values(parsed).flatMap((v) => (Array.isArray(v) ? v.flatMap(text) : text(v)));
}

/** `args` with the JSON literal of `value` (a string, or an integer written bare) replaced by `fresh`. */
function replaceArgument(args: string, value: string, fresh: string): string {
  const quoted = args.split(JSON.stringify(value)).join(JSON.stringify(fresh));
  if (!isIntegerText(value)) return quoted;
  return quoted.replace(new RegExp(`(?<![\\w."])${value}(?![\\w."])`, "g"), fresh);
}

/**
 * The committed answer values of a trace that can be resampled: string and integer arguments of
 * the last assistant turn's tool calls that appear as a whole (trimmed) line of the tool response before it.
 */
export function copiedAnswers(messages: readonly ChatMessage[]): string[] {
  const turn = answerTurn(messages);
  const answer = messages[turn.answer];
  const observation = messages[turn.observation];
  if (answer?.role !== "assistant" || observation?.role !== "tool") return [];
  const lines = new Set(observation.content.split("\n").map((l) => l.trim()));
  const values = (answer.tool_calls ?? []).flatMap((c) => answerArguments(c.function.arguments));
  return [...new Set(values.filter((v) => v.length > 0 && lines.has(v)))];
}

/**
 * One variant of `messages` with its copied answers resampled (see the module comment), or
 * undefined when it has none. The observation and the answer are rewritten; nothing else is.
 */
export function answerVariant(
  messages: readonly ChatMessage[],
  pool: readonly string[],
  random: () => number,
  /** Pieces to recombine words from (`syllablesOf(pool)`); without them, words come from the pool. */
  syllables?: Syllables,
): ChatMessage[] | undefined {
  const values = copiedAnswers(messages);
  const replacement = new Map<string, string>();
  for (const value of values) {
    const fresh =
      syllables && !isIntegerText(value)
        ? recombineValue(value, syllables, random)
        : resampleValue(value, pool, random);
    if (fresh !== undefined && fresh !== value) replacement.set(value, fresh);
  }
  if (replacement.size === 0) return undefined;
  const { answer: last, observation } = answerTurn(messages);
  return messages.map((message, i): ChatMessage => {
    if (i === observation && message.role === "tool") {
      const content = message.content
        .split("\n")
        .map((line) => {
          const fresh = replacement.get(line.trim());
          return fresh === undefined ? line : line.replace(line.trim(), () => fresh);
        })
        .join("\n");
      return { ...message, content };
    }
    if (i === last && message.role === "assistant") {
      const tool_calls = message.tool_calls?.map((call) => {
        let args = call.function.arguments;
        // Rewrite the literals in place, so the argument text keeps the expert's exact formatting.
        for (const [value, fresh] of replacement) args = replaceArgument(args, value, fresh);
        return { ...call, function: { ...call.function, arguments: args } };
      });
      return { ...message, tool_calls };
    }
    return message;
  });
}
