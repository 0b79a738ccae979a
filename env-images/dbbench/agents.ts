import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { callTool, lastObservation, turnsSoFar } from "../common/agent.ts";
import { hashString, Rng } from "../common/rng.ts";
import { type DbbenchSplit, isMutation, loadDbbench } from "./instances.ts";

/**
 * The expert plays the gold answer, as the issue of fidelity needs it: a SELECT instance commits
 * its label; a mutation runs the gold statement (`label[0]`) and then commits. What it fails
 * shows where this server scores or behaves differently from upstream's MySQL 8.
 */
export function dbbenchExpert(split: DbbenchSplit, dataDir?: string): ScriptedAgent {
  return {
    name: `${split}-expert`,
    act(messages: readonly ChatMessage[], index: number): AssistantMessage {
      const instance = loadDbbench(split, dataDir)[index]!;
      const turn = turnsSoFar(messages);
      if (!isMutation(instance)) return callTool("commit_final_answer", { answers: [...instance.label] }, turn);
      if (turn === 0) return callTool("execute_sql", { query: instance.label[0] ?? "" }, turn, "I run the change.");
      return callTool("commit_final_answer", { answers: [] }, turn, "The table is changed.");
    },
  };
}

/** The random baseline: a few generic queries over the instance's table, then a commit of something it saw. */
export function dbbenchRandom(split: DbbenchSplit, dataDir?: string): ScriptedAgent {
  return {
    name: `${split}-random`,
    act(messages: readonly ChatMessage[], index: number): AssistantMessage {
      const instance = loadDbbench(split, dataDir)[index]!;
      const table = instance.tables[0]!;
      const turn = turnsSoFar(messages);
      const rng = new Rng(hashString(`${split}-random:${index}:${turn}`));
      if (turn > 0 && rng.chance(0.35)) {
        const seen = [...lastObservation(messages).matchAll(/'([^']*)'/g)].map((m) => m[1]!);
        return callTool("commit_final_answer", { answers: seen.length > 0 ? [rng.pick(seen)] : [] }, turn);
      }
      const column = `\`${rng.pick(table.columns)}\``;
      const name = `\`${table.name}\``;
      const queries = [
        `SELECT * FROM ${name}`,
        `SELECT ${column} FROM ${name}`,
        `SELECT COUNT(*) FROM ${name}`,
        `SELECT MAX(${column}) FROM ${name}`,
        `SELECT ${column} FROM ${name} ORDER BY ${column} DESC LIMIT 1`,
      ];
      return callTool("execute_sql", { query: rng.pick(queries) }, turn);
    },
  };
}
