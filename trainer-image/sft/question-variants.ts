import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { recombineValue, type Syllables } from "./answer-variants.ts";

/**
 * Question-renamed copies of expert traces, to teach copying the request's own words into the
 * actions. A db question names the column to sum, an os question the file to read; the expert
 * spells that word again in its query or command. The tasks draw those words from small fixed
 * sets (five tables of four columns), so a model can lower its loss by guessing a likely column
 * of the set instead of reading the question, and at this scale it learns to guess (measured by
 * `npm run bench:copy`'s question-word loss, and by RL runs that sum the wrong column). A variant
 * renames each such word to a fresh word recombined from the task's syllables, in every message
 * but the system prompt (the question, the actions, the observations), so only copying predicts it.
 *
 * Which words: letter words of three or more letters in the first user message that an assistant
 * tool call also spells as a whole word, minus the task's frame words (those in at least half of
 * the task's questions, such as `name` in "The name of this table is"): the frame is the task's
 * wording, not the instance's. With `numbers`, also the question's numbers of two or more digits
 * that an action spells (the value an update sets, a row an insert adds), redrawn with as many
 * digits. Task-agnostic: it reads only the messages.
 */

const WORD = /[A-Za-z0-9_]+/g;
const LETTERS = /^[A-Za-z]{3,}$/;
/** A value, not an index or a count: two digits or more, no leading zero. */
const NUMBER = /^[1-9][0-9]+$/;
/** Redraws before a word is left as it is because every fresh draw collided with a word of the trace. */
const DRAWS = 8;

/** The first user message's text: the episode's question ("" when there is none). */
export function firstQuestion(messages: readonly ChatMessage[]): string {
  const user = messages.find((m) => m.role === "user");
  return user?.role === "user" && typeof user.content === "string" ? user.content : "";
}

function wordsOf(text: string): Set<string> {
  return new Set(text.match(WORD) ?? []);
}

/** What the variants rename besides the question's letter words. */
export interface RenameOptions {
  /** The question's numbers of two or more digits that an action spells. @default false */
  readonly numbers?: boolean;
}

function renamable(word: string, options: RenameOptions): boolean {
  return LETTERS.test(word) || (options.numbers === true && NUMBER.test(word));
}

/** The task's frame words: letter words and numbers found in at least half of `questions`. */
export function frameWordsOf(questions: readonly string[]): Set<string> {
  const counts = new Map<string, number>();
  for (const question of questions)
    for (const word of wordsOf(question))
      if (renamable(word, { numbers: true })) counts.set(word, (counts.get(word) ?? 0) + 1);
  return new Set([...counts].filter(([, n]) => 2 * n >= questions.length).map(([word]) => word));
}

/** Frame words per task, from the first user message of each of its traces. */
export function frameWordsByTask(traces: readonly { task: string; messages: readonly ChatMessage[] }[]) {
  const questions = new Map<string, string[]>();
  for (const trace of traces) {
    const list = questions.get(trace.task) ?? [];
    list.push(firstQuestion(trace.messages));
    questions.set(trace.task, list);
  }
  return new Map([...questions].map(([task, list]) => [task, frameWordsOf(list)]));
}

/** The instance's words the actions copy from the question (see the module comment), in question order. */
export function questionWordsInActions(
  messages: readonly ChatMessage[],
  frame: ReadonlySet<string>,
  options: RenameOptions = {},
): string[] {
  const actions = new Set(
    messages.flatMap((m) =>
      m.role === "assistant" ? (m.tool_calls ?? []).flatMap((c) => [...wordsOf(c.function.arguments)]) : [],
    ),
  );
  return [...wordsOf(firstQuestion(messages))].filter((w) => renamable(w, options) && !frame.has(w) && actions.has(w));
}

/** A number of as many digits as `number`, its first not zero. */
function freshNumber(number: string, random: () => number): string {
  const digits = Array.from(
    { length: number.length },
    (_, i) => Math.floor(random() * (i === 0 ? 9 : 10)) + (i === 0 ? 1 : 0),
  );
  return digits.join("");
}

/** Every whole-word occurrence of a key of `renames` in `text` replaced by its value, all at once. */
function renameWords(text: string, renames: ReadonlyMap<string, string>): string {
  return text.replace(WORD, (word) => renames.get(word) ?? word);
}

/**
 * `messages` with `rewrite` applied to every text but the system prompt's: contents, and the
 * assistant's tool-call arguments. Variants rename words consistently through the whole trace.
 */
export function rewriteOutsideSystemPrompt(
  messages: readonly ChatMessage[],
  rewrite: (text: string) => string,
): ChatMessage[] {
  return messages.map((message): ChatMessage => {
    switch (message.role) {
      case "system":
        return message;
      case "assistant":
        return {
          ...message,
          content: message.content === null ? null : rewrite(message.content),
          tool_calls: message.tool_calls?.map((call) => ({
            ...call,
            function: { ...call.function, arguments: rewrite(call.function.arguments) },
          })),
        };
      default:
        return { ...message, content: rewrite(message.content) };
    }
  });
}

/**
 * One variant of `messages` with its question words in the actions (`questionWordsInActions`)
 * renamed to fresh words of `syllables` everywhere but the system prompt, or undefined when there
 * is none to rename. A fresh word differs, ignoring case, from every word of the trace (so a
 * column never becomes `from`) and from the other fresh words.
 */
export function questionVariant(
  messages: readonly ChatMessage[],
  frame: ReadonlySet<string>,
  syllables: Syllables,
  random: () => number,
  options: RenameOptions = {},
): ChatMessage[] | undefined {
  const taken = new Set(
    messages.flatMap((m) => [
      ...wordsOf(typeof m.content === "string" ? m.content : ""),
      ...(m.role === "assistant" ? (m.tool_calls ?? []).flatMap((c) => [...wordsOf(c.function.arguments)]) : []),
    ]),
  );
  const takenLower = new Set([...taken].map((w) => w.toLowerCase()));
  const renames = new Map<string, string>();
  for (const word of questionWordsInActions(messages, frame, options)) {
    for (let draw = 0; draw < DRAWS; draw++) {
      const fresh = NUMBER.test(word) ? freshNumber(word, random) : recombineValue(word, syllables, random);
      if (fresh === undefined) return undefined;
      if (takenLower.has(fresh.toLowerCase())) continue;
      renames.set(word, fresh);
      takenLower.add(fresh.toLowerCase());
      break;
    }
  }
  if (renames.size === 0) return undefined;
  return rewriteOutsideSystemPrompt(messages, (text) => renameWords(text, renames));
}
