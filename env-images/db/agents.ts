import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { callTool, lastObservation, taskStatement, turnsSoFar } from "../common/agent.ts";
import { hashString, Rng } from "../common/rng.ts";
import { generateDbInstance, isMutation } from "./generator.ts";

/** Cells of a rendered result table ("a | b" lines between the header and the "(n rows)" line). */
export function parseResultCells(observation: string): string[] {
  if (observation.startsWith("Error") || observation.startsWith("OK")) return [];
  const lines = observation.split("\n");
  const cells: string[] = [];
  for (const line of lines.slice(1)) {
    if (line === "" || line.startsWith("(") || line.startsWith("...")) break;
    cells.push(...line.split(" | "));
  }
  return cells;
}

/**
 * The expert: knows how instance `index` was generated, so it writes the reference statement,
 * runs it with `execute_sql`, reads the rows from the observation and commits them (or, for a
 * change to the table, commits an empty list once the change is made).
 */
export const dbExpert: ScriptedAgent = {
  name: "db-expert",
  act(messages: readonly ChatMessage[], index: number): AssistantMessage {
    const instance = generateDbInstance(index);
    const turn = turnsSoFar(messages);
    if (turn === 0) {
      return callTool(
        "execute_sql",
        { query: instance.referenceSql },
        turn,
        "I will run a query that answers the task.",
      );
    }
    const answers = isMutation(instance.kind) ? [] : parseResultCells(lastObservation(messages));
    return callTool("commit_final_answer", { answers }, turn, "The result above is the answer.");
  },
};

/** Table name and headers as the task statement gives them. */
function schemaFrom(statement: string): { table: string; columns: string[] } {
  const match = /The name of this table is (\w+), and the headers of this table are ([^.]+)\./.exec(statement);
  return { table: match?.[1] ?? "t", columns: match?.[2]?.split(", ") ?? ["*"] };
}

/**
 * The random baseline: plausible but undirected queries over the table, and after a few of them
 * a commit of a random value it has seen (or of nothing).
 */
export const dbRandom: ScriptedAgent = {
  name: "db-random",
  act(messages: readonly ChatMessage[], index: number): AssistantMessage {
    const turn = turnsSoFar(messages);
    const rng = new Rng(hashString(`db-random:${index}:${turn}`));
    const { table, columns } = schemaFrom(taskStatement(messages));
    if (turn > 0 && rng.chance(0.35)) {
      const cells = parseResultCells(lastObservation(messages));
      const answers = cells.length > 0 && rng.chance(0.8) ? [rng.pick(cells)] : [];
      return callTool("commit_final_answer", { answers }, turn);
    }
    const column = rng.pick(columns);
    const queries = [
      `SELECT * FROM ${table}`,
      `SELECT ${column} FROM ${table}`,
      `SELECT COUNT(*) FROM ${table}`,
      `SELECT MAX(${column}) FROM ${table}`,
      `SELECT MIN(${column}) FROM ${table}`,
      `SELECT ${column} FROM ${table} ORDER BY ${rng.pick(columns)} DESC LIMIT 1`,
      `DELETE FROM ${table} WHERE ${column} < ${rng.int(0, 100)}`,
      `SELECT ${column} FROM ${table} WHERE ${rng.pick(columns)} > ${rng.int(0, 500)}`,
    ];
    return callTool("execute_sql", { query: rng.pick(queries) }, turn);
  },
};
