import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { callTool, lastObservation, turnsSoFar } from "../common/agent.ts";
import { hashString, Rng } from "../common/rng.ts";
import { generateSynthInstance } from "./generator.ts";
import { type DbbenchInstance, isMutation, loadDbbench } from "./instances.ts";
import { cleanAnswer } from "./scorer.ts";
import type { DbbenchTaskName } from "./task.ts";

function instanceOf(task: DbbenchTaskName, index: number): DbbenchInstance & { referenceSql?: string } {
  return task === "dbbench-synth" ? generateSynthInstance(index) : loadDbbench(task)[index]!;
}

/**
 * The expert plays the gold answer. Published instances: a SELECT commits its label; a mutation
 * runs the gold statement (`label[0]`) and commits. What it fails shows where this server scores
 * or behaves differently from upstream's. Generated instances: it runs the reference statement and
 * commits the values it read (or, for a mutation, commits once the change is made).
 */
export function dbbenchExpert(task: DbbenchTaskName): ScriptedAgent {
  return {
    name: `${task}-expert`,
    act(messages: readonly ChatMessage[], index: number): AssistantMessage {
      const instance = instanceOf(task, index);
      const turn = turnsSoFar(messages);
      const gold = instance.referenceSql ?? (isMutation(instance) ? instance.label[0] : undefined);
      if (gold === undefined) return callTool("commit_final_answer", { answers: [...instance.label] }, turn);
      if (turn === 0) return callTool("execute_sql", { query: gold }, turn, "I run the statement that answers it.");
      const answers = isMutation(instance) ? [] : cleanAnswer(lastObservation(messages));
      return callTool("commit_final_answer", { answers }, turn, "The result above is the answer.");
    },
  };
}

/** The random baseline: a few generic queries over the instance's table, then a commit of something it saw. */
export function dbbenchRandom(task: DbbenchTaskName): ScriptedAgent {
  return {
    name: `${task}-random`,
    act(messages: readonly ChatMessage[], index: number): AssistantMessage {
      const table = instanceOf(task, index).tables[0]!;
      const turn = turnsSoFar(messages);
      const rng = new Rng(hashString(`${task}-random:${index}:${turn}`));
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
