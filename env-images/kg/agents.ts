import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { callTool, observations, taskStatement, turnsSoFar } from "../common/agent.ts";
import { hashString, Rng } from "../common/rng.ts";
import { generateKgInstance, type Ref } from "./generator.ts";
import { ATTRIBUTES, RELATIONS } from "./graph.ts";

/** One planned tool call; `produces` names the program step whose variable it creates. */
interface PlannedCall {
  readonly tool: string;
  readonly args: Readonly<Record<string, Ref | string>>;
  readonly produces?: number;
}

/**
 * The expert's plan for instance `index`: the generating program as tool calls, each hop
 * preceded by get_relations and each argmax/argmin by get_attributes, as a careful agent would.
 */
function plan(index: number): PlannedCall[] {
  const { program } = generateKgInstance(index);
  const calls: PlannedCall[] = [];
  program.forEach((step, produces) => {
    switch (step.op) {
      case "get_neighbors":
        calls.push({ tool: "get_relations", args: { variable: step.from } });
        calls.push({ tool: "get_neighbors", args: { variable: step.from, relation: step.relation }, produces });
        break;
      case "intersection":
        calls.push({ tool: "intersection", args: { variable1: step.a, variable2: step.b }, produces });
        break;
      case "argmax":
      case "argmin":
        calls.push({ tool: "get_attributes", args: { variable: step.from } });
        calls.push({ tool: step.op, args: { variable: step.from, attribute: step.attribute }, produces });
        break;
      case "count":
        calls.push({ tool: "count", args: { variable: step.from }, produces });
        break;
    }
  });
  calls.push({ tool: "final_answer", args: { variable: { step: program.length - 1 } } });
  return calls;
}

/**
 * The expert: follows the generating program through the tools, reading each new variable's id
 * from the observation ("variable #k, ...") instead of assuming it.
 */
export const kgExpert: ScriptedAgent = {
  name: "kg-expert",
  act(messages: readonly ChatMessage[], index: number): AssistantMessage {
    const calls = plan(index);
    const turn = turnsSoFar(messages);
    const seen = observations(messages);
    const variableOf = (step: number): string => {
      const producer = calls.findIndex((c) => c.produces === step);
      const id = /variable (#\d+)/.exec(seen[producer] ?? "")?.[1];
      if (!id) throw new Error(`kg expert: no variable for step ${step} in "${seen[producer]}"`);
      return id;
    };
    const call = calls[Math.min(turn, calls.length - 1)]!;
    const args = Object.fromEntries(
      Object.entries(call.args).map(([key, ref]) => [
        key,
        typeof ref === "string" ? ref : "entity" in ref ? ref.entity : variableOf(ref.step),
      ]),
    );
    return callTool(call.tool, args, turn);
  },
};

/**
 * The random baseline: random tools on the question's entities and the variables it has made,
 * with relations it has seen (or any relation), answering with a random variable now and then.
 */
export const kgRandom: ScriptedAgent = {
  name: "kg-random",
  act(messages: readonly ChatMessage[], index: number): AssistantMessage {
    const turn = turnsSoFar(messages);
    const rng = new Rng(hashString(`kg-random:${index}:${turn}`));
    const entities = /Entities: \[(.*)\]/.exec(taskStatement(messages))?.[1]?.split(", ") ?? [];
    const seen = observations(messages);
    const variables = seen.flatMap((o) => /^variable (#\d+)/.exec(o)?.[1] ?? []);
    const seenRelations = seen.flatMap((o) => (o.startsWith("[") ? o.slice(1, -1).split(", ") : []));
    const subject = () => rng.pick([...entities, ...variables, ...variables]);
    const relation = () =>
      seenRelations.length > 0 && rng.chance(0.7) ? rng.pick(seenRelations) : rng.pick(RELATIONS).name;
    if (variables.length > 0 && rng.chance(0.2))
      return callTool("final_answer", { variable: rng.pick(variables) }, turn);
    switch (rng.int(0, 5)) {
      case 0:
      case 1:
        return callTool("get_relations", { variable: subject() }, turn);
      case 2:
      case 3:
        return callTool("get_neighbors", { variable: subject(), relation: relation() }, turn);
      case 4:
        return callTool("intersection", { variable1: subject(), variable2: subject() }, turn);
      default:
        return callTool(
          rng.pick(["argmax", "argmin", "count"]),
          { variable: subject(), attribute: rng.pick(ATTRIBUTES).name },
          turn,
        );
    }
  },
};
