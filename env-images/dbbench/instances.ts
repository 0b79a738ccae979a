import { parse as parseLossless } from "lossless-json";
import { z } from "zod";
import { readAgentBenchFile } from "../../shared/agentbench/data.ts";
import { AgentRlError, issuesOf } from "../../shared/errors.ts";
import { type PyValue, pyNumberFromJson, pyStr } from "./python.ts";
import { MUTATION_TYPES } from "./scorer.ts";

/**
 * DBBench instances as AgentBench publishes them (`data/dbbench/*.jsonl`, one per line; the index
 * is the line number). Numbers are read as Python's json module reads them, so `str(cell)` is
 * upstream's text (`82562.0` stays `82562.0`, which JSON.parse would make `82562`).
 */

/** The files behind each task, as AgentBench FC's configs name them. */
export const DBBENCH_FILES = {
  "dbbench-std": "dbbench/standard.jsonl",
  "dbbench-dev": "dbbench/dev.jsonl",
} as const;
export type DbbenchSplit = keyof typeof DBBENCH_FILES;

/** Instance counts of the pinned files (their hashes are checked on load). */
export const DBBENCH_SIZES: Readonly<Record<DbbenchSplit, number>> = { "dbbench-std": 300, "dbbench-dev": 60 };

const PyNumber = z.custom<PyValue>(
  (v) => typeof v === "object" && v !== null && "kind" in v && (v.kind === "int" || v.kind === "float"),
  "a number",
);
/** A cell or label item as upstream's `str()` prints it. */
const PyScalar = z.union([z.string(), PyNumber, z.boolean(), z.null()]).transform((v) => pyStr(v));

// Names as published: one dev instance has an empty column name, which MySQL refuses (upstream too).
const Column = z.object({ name: z.string().max(64), type: z.string() });
const Table = z.object({
  table_name: z.string().min(1).max(64),
  table_info: z.object({ columns: z.array(Column).min(1), rows: z.array(z.array(PyScalar)) }),
});

const RawInstance = z
  .object({
    description: z.string(),
    type: z.array(z.string()).min(1),
    label: z.array(PyScalar).default([]),
    answer_md5: z.string().optional(),
    table: z.union([Table, z.array(Table).min(1)]),
    add_description: z.string().optional(),
    evidence: z.string().optional(),
  })
  .superRefine((instance, ctx) => {
    if (MUTATION_TYPES.has(instance.type[0]!) && instance.answer_md5 === undefined)
      ctx.addIssue({ code: "custom", path: ["answer_md5"], message: "a mutation instance needs answer_md5" });
  });

export interface DbbenchTable {
  readonly name: string;
  readonly columns: readonly string[];
  readonly rows: readonly (readonly string[])[];
}

export interface DbbenchInstance {
  readonly index: number;
  /** Upstream's question type: INSERT, UPDATE, DELETE, or a SELECT kind (counting, ranking, ...). */
  readonly type: string;
  readonly description: string;
  readonly addDescription: string;
  readonly evidence: string;
  readonly tables: readonly DbbenchTable[];
  /** SELECT truth (strings as printed by `str()`); for mutations, `label[0]` is the gold SQL. */
  readonly label: readonly string[];
  /** Mutation truth: the connector's printed `[('<md5>',)]`. */
  readonly answerMd5?: string;
}

export const isMutation = (instance: DbbenchInstance): boolean => MUTATION_TYPES.has(instance.type);

/** Parses a DBBench .jsonl file; a bad line is reported with its number and field path. */
export function parseDbbench(text: string, source: string): DbbenchInstance[] {
  const lines = text.replace(/\n+$/, "").split("\n");
  return lines.map((line, index) => {
    let raw: unknown;
    try {
      raw = parseLossless(line, null, pyNumberFromJson);
    } catch (error) {
      throw new AgentRlError(
        `${source} line ${index + 1}: not JSON (${error instanceof Error ? error.message : error})`,
      );
    }
    const parsed = RawInstance.safeParse(raw);
    if (!parsed.success)
      throw new AgentRlError(
        `${source} line ${index + 1}: ${issuesOf(parsed.error)
          .map((i) => `${i.path}: ${i.message}`)
          .join("; ")}`,
      );
    const entry = parsed.data;
    const tables = (Array.isArray(entry.table) ? entry.table : [entry.table]).map((t) => ({
      name: t.table_name,
      columns: t.table_info.columns.map((c) => c.name),
      rows: t.table_info.rows,
    }));
    return {
      index,
      type: entry.type[0]!,
      description: entry.description,
      addDescription: entry.add_description ?? "",
      evidence: entry.evidence ?? "",
      tables,
      label: entry.label,
      ...(entry.answer_md5 !== undefined ? { answerMd5: entry.answer_md5 } : {}),
    };
  });
}

const cache = new Map<DbbenchSplit, DbbenchInstance[]>();

/** The instances of a split, read once per process from the AgentBench data folder. */
export function loadDbbench(split: DbbenchSplit, configuredDir?: string): DbbenchInstance[] {
  const cached = cache.get(split);
  if (cached) return cached;
  const { text, file } = readAgentBenchFile(DBBENCH_FILES[split], configuredDir);
  const instances = parseDbbench(text, file);
  cache.set(split, instances);
  return instances;
}

/** The opening user message, built as upstream builds it. */
export function userPrompt(instance: DbbenchInstance): string {
  let prompt = "";
  if (instance.evidence !== "") prompt += `Evidence about the question: ${instance.evidence}\n`;
  if (instance.addDescription !== "")
    prompt += `Additional table information about the question: ${instance.addDescription}\n`;
  return `${prompt}Question: ${instance.description}\n`;
}
