import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { rewriteOutsideSystemPrompt } from "./question-variants.ts";

/**
 * Identifier-redrawn copies of expert traces, to teach copying an identifier off a page into an
 * action. A webshop expert clicks a product by the id its results page shows (`[B0X7K2M9QP]`);
 * the ids are random per instance, so an action can only be right by copying, but a trace holds
 * one or two such clicks, and a warm-up that sees a few hundred of them learns the ids' shape and
 * clicks made-up ones (measured: 0 of 121 sampled clicks named an element of the page). A variant
 * redraws each identifier an action copies from an earlier message, in every message but the
 * system prompt (the pages and the actions alike), so the trace stays consistent and the copy
 * is new.
 *
 * An identifier is a run of six or more letters and digits holding both; the redraw keeps the
 * task's id prefix (the longest prefix all its copied identifiers share, as webshop's `B0`) and
 * each other character's kind (digit, capital, small letter). Task-agnostic: it reads only the messages.
 */

const IDENTIFIER = /\b(?=[A-Za-z0-9]*[0-9])(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{6,}\b/g;
const WORD = /[A-Za-z0-9_]+/g;
/** Redraws before an identifier is left as it is because every fresh draw collided with a word of the trace. */
const DRAWS = 8;

const DIGITS = "0123456789";
const CAPITALS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
const SMALL = "abcdefghijklmnopqrstuvwxyz";

function textOf(message: ChatMessage): string {
  if (message.role === "assistant")
    return [message.content ?? "", ...(message.tool_calls ?? []).map((c) => c.function.arguments)].join("\n");
  return message.content;
}

/**
 * The identifiers the trace's tool calls copy from an earlier message other than the system
 * prompt (a page, the request), in the order the calls spell them.
 */
export function copiedIdentifiers(messages: readonly ChatMessage[]): string[] {
  const seen = new Set<string>();
  const copied = new Set<string>();
  for (const message of messages) {
    if (message.role === "assistant")
      for (const call of message.tool_calls ?? [])
        for (const id of call.function.arguments.match(IDENTIFIER) ?? []) if (seen.has(id)) copied.add(id);
    if (message.role !== "system") for (const id of textOf(message).match(IDENTIFIER) ?? []) seen.add(id);
  }
  return [...copied];
}

/** The longest prefix every one of `identifiers` starts with (empty for none). */
export function sharedPrefix(identifiers: readonly string[]): string {
  if (identifiers.length === 0) return "";
  let prefix = identifiers[0] as string;
  for (const id of identifiers) while (!id.startsWith(prefix)) prefix = prefix.slice(0, -1);
  return prefix;
}

/** `id` after `prefix` with each character replaced by a random one of its kind. */
function redraw(id: string, prefix: string, random: () => number): string {
  const pick = (from: string) => from[Math.floor(random() * from.length)] as string;
  const tail = [...id.slice(prefix.length)].map((c) =>
    DIGITS.includes(c) ? pick(DIGITS) : CAPITALS.includes(c) ? pick(CAPITALS) : pick(SMALL),
  );
  return prefix + tail.join("");
}

/**
 * One variant of `messages` with its copied identifiers (`copiedIdentifiers`) redrawn everywhere
 * but the system prompt, or undefined when it has none. `prefix` is kept (the task's shared id
 * prefix, `sharedPrefix` of its traces' copied identifiers); it is ignored for an identifier
 * that does not start with it, or that it would leave unchanged. A fresh identifier differs from
 * every word of the trace and from the other fresh ones.
 */
export function identifierVariant(
  messages: readonly ChatMessage[],
  prefix: string,
  random: () => number,
): ChatMessage[] | undefined {
  const taken = new Set(messages.flatMap((m) => textOf(m).match(WORD) ?? []));
  const renames = new Map<string, string>();
  for (const id of copiedIdentifiers(messages)) {
    const kept = id.startsWith(prefix) && id.length > prefix.length ? prefix : "";
    for (let draw = 0; draw < DRAWS; draw++) {
      const fresh = redraw(id, kept, random);
      if (taken.has(fresh)) continue;
      renames.set(id, fresh);
      taken.add(fresh);
      break;
    }
  }
  if (renames.size === 0) return undefined;
  return rewriteOutsideSystemPrompt(messages, (text) => text.replace(IDENTIFIER, (id) => renames.get(id) ?? id));
}

/**
 * Where the assistant (loss-masked) tokens spell one of `ids` (each given as its token ids,
 * spelled with and without a leading space by the caller): [start, end) spans in token order,
 * for crops that end at a copied identifier.
 */
export function identifierSpans(
  tokens: readonly number[],
  lossMask: ArrayLike<number>,
  ids: readonly (readonly number[])[],
): Array<readonly [number, number]> {
  const spans: Array<readonly [number, number]> = [];
  for (let i = 0; i < tokens.length; i++)
    for (const id of ids) {
      if (id.length === 0 || i + id.length > tokens.length) continue;
      if (id.every((token, k) => tokens[i + k] === token && lossMask[i + k] === 1)) {
        spans.push([i, i + id.length]);
        break;
      }
    }
  return spans;
}
