import { type PyValue, pyEvalLiteral, pyParseFloat, pyStr, pyStrip } from "./python.ts";

/**
 * DBBench's scoring, rule for rule as AgentBench FC's `DBResultProcessor` (result_processor.py at
 * the pinned commit) applies it:
 * - every value: `str(v).strip().strip("'\"")`, then `%` dropped (and nothing else done), else
 *   thousands commas removed, then None/null/undefined/nan/inf/infinity/"" read as "0";
 * - a string answer that looks like a MySQL result (`[('x',), ...]`) or a Python list is parsed
 *   as upstream's `eval` would, with its manual comma split as the fallback;
 * - one value each: both "0" match; both numbers match within 0.01; otherwise exact, case-sensitive;
 * - several: all numbers → same count, matched one to one within 0.01; otherwise set equality
 *   (duplicates and order ignored);
 * - INSERT/UPDATE/DELETE: the table hash string equals `answer_md5` after the same cleaning.
 */

export const MUTATION_TYPES: ReadonlySet<string> = new Set(["INSERT", "UPDATE", "DELETE"]);
export const FLOAT_TOLERANCE = 1e-2;

const SPECIAL_ZERO: ReadonlySet<string> = new Set([
  "none",
  "null",
  "undefined",
  "nan",
  "inf",
  "infinity",
  "-inf",
  "-infinity",
  "",
]);

/** `_normalize_special_values`. */
export function normalizeSpecialValue(value: string | null): string {
  if (value === null) return "0";
  let text = pyStrip(value);
  if (text.endsWith("%")) return pyStrip(text.slice(0, -1));
  if (text.includes(",") && !text.startsWith("[") && !text.endsWith("]")) text = text.replaceAll(",", "");
  return SPECIAL_ZERO.has(text.toLowerCase()) ? "0" : text;
}

const stripQuotes = (text: string): string => pyStrip(pyStrip(text), "'\"");

/** One element of a parsed list: a 1-tuple stands for its value. */
function itemText(item: PyValue): string {
  if (item !== null && typeof item === "object" && item.kind === "tuple" && item.items.length === 1)
    return stripQuotes(pyStr(item.items[0]!));
  return stripQuotes(pyStr(item));
}

/** `_clean_mysql_result`: a string printed from connector rows, or undefined when it is not one. */
function cleanMysqlResult(text: string): string[] | undefined {
  if (!(text.startsWith("[") && text.endsWith("]"))) return undefined;
  const parsed = pyEvalLiteral(text);
  if (
    parsed !== undefined &&
    parsed !== null &&
    typeof parsed === "object" &&
    parsed.kind === "list" &&
    parsed.items.every((item) => item !== null && typeof item === "object" && item.kind === "tuple")
  ) {
    return parsed.items.flatMap((item) => {
      const tuple = item as { items: readonly PyValue[] };
      return tuple.items.length === 1 ? [stripQuotes(pyStr(tuple.items[0]!))] : [];
    });
  }
  const inner = pyStrip(text, "[]");
  if (inner.split("(").length - 1 === 1 && inner.startsWith("(") && inner.endsWith(",)"))
    return [stripQuotes(inner.slice(1, -2))];
  return undefined;
}

/** The manual split upstream falls back to when `eval` of a bracketed answer fails. */
function splitByHand(body: string): string[] {
  const items: string[] = [];
  let current = "";
  let inQuotes = false;
  for (const char of body) {
    if (char === '"' || char === "'") inQuotes = !inQuotes;
    else if (char === "," && !inQuotes) {
      if (current) items.push(normalizeSpecialValue(stripQuotes(current)));
      current = "";
    } else current += char;
  }
  if (current) items.push(normalizeSpecialValue(stripQuotes(current)));
  return items;
}

/** An answer as the scorer receives it: the tool's argument value, or the ground truth. */
export type Answer = PyValue | readonly PyValue[];

/** `_clean_answer`. */
export function cleanAnswer(answer: Answer): string[] {
  if (answer === null) return ["0"];
  if (typeof answer === "string") {
    const fromRows = cleanMysqlResult(answer);
    if (fromRows) return fromRows.map(normalizeSpecialValue);
    const text = pyStrip(answer);
    if (text.startsWith("[") && text.endsWith("]")) {
      const parsed = pyEvalLiteral(text);
      if (parsed !== undefined && parsed !== null && typeof parsed === "object" && parsed.kind === "list")
        return parsed.items.map((item) => normalizeSpecialValue(itemText(item)));
      return splitByHand(text.slice(1, -1));
    }
    return [normalizeSpecialValue(stripQuotes(text))];
  }
  if (Array.isArray(answer)) return (answer as readonly PyValue[]).map((item) => normalizeSpecialValue(itemText(item)));
  const value = answer as PyValue;
  if (value !== null && typeof value === "object" && (value.kind === "list" || value.kind === "tuple"))
    return value.items.map((item) => normalizeSpecialValue(itemText(item)));
  return [normalizeSpecialValue(stripQuotes(pyStr(value)))];
}

const isFloat = (text: string): boolean => pyParseFloat(text) !== undefined;
const floatEqual = (a: string, b: string): boolean =>
  Math.abs((pyParseFloat(a) ?? Number.NaN) - (pyParseFloat(b) ?? Number.NaN)) <= FLOAT_TOLERANCE;

/** `compare_results`: true when the answer scores 1. */
export function compareResults(answer: Answer, groundTruth: Answer, questionType: string): boolean {
  const given = cleanAnswer(answer);
  const truth = cleanAnswer(groundTruth);
  if (MUTATION_TYPES.has(questionType)) return given.length === truth.length && given.every((v, i) => v === truth[i]);
  if (given.length === 1 && truth.length === 1) {
    const [a, b] = [given[0]!, truth[0]!];
    if (a === "0" && b === "0") return true;
    if (isFloat(a) && isFloat(b)) return floatEqual(a, b);
    return a === b;
  }
  if (given.every(isFloat) && truth.every(isFloat)) {
    if (given.length !== truth.length) return false;
    const used = truth.map(() => false);
    for (const a of given) {
      const i = truth.findIndex((b, j) => !used[j] && floatEqual(a, b));
      if (i < 0) return false;
      used[i] = true;
    }
    return used.every(Boolean);
  }
  const a = new Set(given);
  const b = new Set(truth);
  return a.size === b.size && [...a].every((v) => b.has(v));
}

/** The hash string upstream extracts from the printed `[('<md5>',)]` of its hash query. */
export function hashFromPrinted(printed: string): string {
  const cleaned = pyStrip(printed, "[]()");
  return pyStrip(pyStrip(cleaned.split(",")[0] ?? ""), "'");
}
