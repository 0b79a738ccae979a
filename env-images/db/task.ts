import { createHash } from "node:crypto";
import { z } from "zod";
import type { Episode, StepResult, TaskDefinition, ToolDefinition } from "../../shared/env/task.ts";
import { type ExecOutcome, type ResultCaps, type ResultSet, SqlSession, type SqlValue } from "./engine.ts";
import { DB_SPLITS, type DbInstance, generateDbInstance, isMutation } from "./generator.ts";

/**
 * The DB task (AgentBench dbbench, function-call form): the agent explores a generated SQLite
 * table with `execute_sql` and ends with `commit_final_answer`. Reward 1 when the committed
 * answers equal the reference query's result (as a multiset, numbers compared numerically), or,
 * for INSERT/UPDATE/DELETE tasks, when the table's content hash equals the reference one.
 */

/** AgentBench DB turn limit. */
export const DB_MAX_TURNS = 15;
/** Default per-statement limit; a statement running longer is stopped and reported. */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 2_000;
/** At most this many result rows are shown; the rest are counted. */
const MAX_ROWS_SHOWN = 20;
const MAX_CELL_CHARS = 60;
/**
 * What of an agent's result leaves the SQL thread: cells past 1 KiB and rows past 64 KiB in all
 * are cut there (20 rows of 25 MB blobs would otherwise cost the worker over a gigabyte).
 */
export const AGENT_RESULT_CAPS: ResultCaps = {
  maxRows: MAX_ROWS_SHOWN,
  maxCellBytes: 1_024,
  maxResultBytes: 64 * 1_024,
};
/** Longest observation; wide results are cut here with a note. */
const MAX_OBSERVATION_CHARS = 1_500;
const MAX_SQL_CHARS = 4_000;

/** Arguments of `execute_sql`. */
export const ExecuteSqlArgs = z.object({
  query: z.string().min(1).max(MAX_SQL_CHARS).describe("One SQL statement in the SQLite dialect."),
});
/** Arguments of `commit_final_answer`. */
export const CommitFinalAnswerArgs = z.object({
  answers: z
    .array(z.string().max(500))
    .max(100)
    .describe("The answer values as strings (one per value); an empty list for tasks that change the table."),
});

const TOOLS: readonly ToolDefinition[] = [
  {
    name: "execute_sql",
    description:
      "Executes one SQL statement on the database and returns its result rows or the number of changed rows.",
    parameters: ExecuteSqlArgs,
  },
  {
    name: "commit_final_answer",
    description:
      "Commits the final answer and ends the task. Pass the answer values as a list of strings; for a task that modifies the table, make the change first and commit an empty list.",
    parameters: CommitFinalAnswerArgs,
  },
];

const SYSTEM_PROMPT =
  "You are an agent that operates a SQLite database to complete the user's task. Call execute_sql to run one SQL statement at a time; " +
  "when you know the answer, call commit_final_answer with the answer values. For a task that inserts, updates or deletes rows, " +
  "make the change with execute_sql and then call commit_final_answer with an empty list.";

function cellText(value: SqlValue): string {
  if (value === null) return "NULL";
  if (value instanceof Uint8Array) return `<blob ${value.length} bytes>`;
  const text = String(value);
  return text.length > MAX_CELL_CHARS ? `${text.slice(0, MAX_CELL_CHARS)}...` : text;
}

function renderResultSet(set: ResultSet): string {
  const lines = [set.columns.join(" | ")];
  for (const row of set.values.slice(0, MAX_ROWS_SHOWN)) lines.push(row.map(cellText).join(" | "));
  const n = set.total;
  if (n > MAX_ROWS_SHOWN) lines.push(`... (${n} rows in all, first ${MAX_ROWS_SHOWN} shown)`);
  else lines.push(`(${n} ${n === 1 ? "row" : "rows"})`);
  return lines.join("\n");
}

/** What the SQL thread cut from a result, in the agent's words. */
function capNotes(set: ResultSet): string[] {
  const notes: string[] = [];
  if (set.truncatedCells > 0) {
    const cells = set.truncatedCells === 1 ? "cell" : "cells";
    notes.push(`[${set.truncatedCells} ${cells} truncated to ${AGENT_RESULT_CAPS.maxCellBytes} bytes]`);
  }
  if (set.byteLimited) {
    notes.push(
      `[result truncated: ${set.values.length} of ${set.total} rows kept, the result passed ${AGENT_RESULT_CAPS.maxResultBytes} bytes]`,
    );
  }
  return notes;
}

/** The text an agent reads after `execute_sql`. */
export function renderOutcome(outcome: ExecOutcome): string {
  switch (outcome.kind) {
    case "timeout":
      return `Error: the query ran longer than ${outcome.limitMs} ms and was stopped; it changed nothing. Write a query that finishes quickly.`;
    case "error":
      return `Error: ${outcome.message}`;
    case "ok": {
      const withColumns = outcome.results.filter((r) => r.columns.length > 0);
      if (withColumns.length === 0) {
        return outcome.changes > 0
          ? `OK, ${outcome.changes} ${outcome.changes === 1 ? "row" : "rows"} changed.`
          : "OK, no rows returned.";
      }
      const text = withColumns.map(renderResultSet).join("\n\n");
      const shown =
        text.length > MAX_OBSERVATION_CHARS
          ? `${text.slice(0, MAX_OBSERVATION_CHARS)}\n... (output cut at ${MAX_OBSERVATION_CHARS} characters)`
          : text;
      // The notes come after the cut, so the agent always learns that its result was capped.
      return [shown, ...withColumns.flatMap(capNotes)].join("\n");
    }
  }
}

/**
 * Canonical form of one answer value: numbers compare by value (rounded to 4 decimals, so
 * `12`, `12.0` and `12.00001` agree), text compares trimmed and case-insensitively.
 */
export function normalizeAnswer(value: string): string {
  const text = value.trim();
  const number = Number(text);
  if (text !== "" && Number.isFinite(number)) return String(Math.round(number * 1e4) / 1e4);
  return text.toLowerCase();
}

/** True when both lists hold the same values the same number of times. */
export function answersMatch(given: readonly string[], expected: readonly string[]): boolean {
  const a = given.map(normalizeAnswer).sort();
  const b = expected.map(normalizeAnswer).sort();
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** Order-independent hash of a table's rows (the judge of INSERT/UPDATE/DELETE tasks). */
export function tableHash(rows: readonly (readonly SqlValue[])[] | null): string {
  if (rows === null) return "missing";
  const lines = rows.map((row) => JSON.stringify(row.map((v) => (v instanceof Uint8Array ? [...v] : v)))).sort();
  return createHash("sha256").update(lines.join("\n")).digest("hex");
}

/** Values of every cell of the reference result, in order, as strings. */
function flattenCells(outcome: ExecOutcome): string[] {
  if (outcome.kind !== "ok") throw new Error(`reference query failed: ${renderOutcome(outcome)}`);
  return outcome.results.flatMap((set) =>
    set.values.flatMap((row) => row.map((v) => (v === null ? "NULL" : String(v)))),
  );
}

type Expected = { readonly answers: readonly string[] } | { readonly hash: string };

/** Computes the ground truth by running the reference statement on a scratch copy of the table. */
async function groundTruth(instance: DbInstance, timeoutMs: number): Promise<Expected> {
  const scratch = await SqlSession.open(instance.setupSql, Math.max(timeoutMs, 5_000));
  try {
    const outcome = await scratch.exec(instance.referenceSql);
    if (!isMutation(instance.kind)) return { answers: flattenCells(outcome) };
    if (outcome.kind !== "ok") throw new Error(`reference statement failed: ${renderOutcome(outcome)}`);
    return { hash: tableHash(await scratch.tableRows(instance.table)) };
  } finally {
    scratch.close();
  }
}

class DbEpisode implements Episode {
  readonly messages;

  constructor(
    private readonly instance: DbInstance,
    private readonly sql: SqlSession,
    private readonly expected: Expected,
  ) {
    this.messages = [
      { role: "system" as const, content: SYSTEM_PROMPT },
      {
        role: "user" as const,
        content: `${instance.question}\nThe name of this table is ${instance.table}, and the headers of this table are ${instance.columns.join(", ")}.`,
      },
    ];
  }

  async call(tool: string, args: unknown, signal: AbortSignal): Promise<StepResult> {
    if (tool === "execute_sql") {
      const { query } = ExecuteSqlArgs.parse(args);
      return { observation: renderOutcome(await this.sql.exec(query, signal, AGENT_RESULT_CAPS)) };
    }
    const { answers } = CommitFinalAnswerArgs.parse(args);
    let correct: boolean;
    if ("hash" in this.expected) {
      correct = tableHash(await this.sql.tableRows(this.instance.table)) === this.expected.hash;
    } else {
      correct = answersMatch(answers, this.expected.answers);
    }
    return {
      observation: "Your answer has been committed.",
      reward: { reward: correct ? 1 : 0, metrics: { success: correct ? 1 : 0 } },
      finish: "completed",
    };
  }

  close(): void {
    this.sql.close();
  }
}

/**
 * Ground truths by instance index. A GRPO group plays the same index n times, so computing the
 * reference once per index saves most of the start-up work; the oldest entries are dropped.
 */
class GroundTruthCache {
  private readonly entries = new Map<number, Promise<Expected>>();

  constructor(private readonly capacity: number) {}

  get(instance: DbInstance, timeoutMs: number): Promise<Expected> {
    const cached = this.entries.get(instance.index);
    if (cached) return cached;
    const computed = groundTruth(instance, timeoutMs);
    computed.catch(() => this.entries.delete(instance.index));
    this.entries.set(instance.index, computed);
    if (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
    return computed;
  }
}

/** Settings of `createDbTask`. */
export interface DbTaskOptions {
  /** Per-statement time limit in milliseconds (default 2000). */
  readonly statementTimeoutMs?: number;
}

/** Builds the DB task definition. */
export function createDbTask(options: DbTaskOptions = {}): TaskDefinition {
  const timeoutMs = options.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  const truths = new GroundTruthCache(1024);
  return {
    name: "db",
    tools: TOOLS,
    maxTurns: DB_MAX_TURNS,
    splits: DB_SPLITS,
    categoryOf: (index: number) => generateDbInstance(index).kind,
    async start(index: number): Promise<Episode> {
      const instance = generateDbInstance(index);
      const expected = await truths.get(instance, timeoutMs);
      const sql = await SqlSession.open(instance.setupSql, timeoutMs);
      return new DbEpisode(instance, sql, expected);
    },
  };
}
