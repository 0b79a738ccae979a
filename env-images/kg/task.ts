import { z } from "zod";
import type { Episode, StepResult, TaskDefinition, ToolDefinition } from "../../shared/env/task.ts";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import {
  countOf,
  entityValue,
  extreme,
  generateKgInstance,
  intersect,
  KG_SPLITS,
  type KgInstance,
  type KgValue,
  neighborsOf,
} from "./generator.ts";
import { ATTRIBUTES } from "./graph.ts";

/**
 * The KG task (AgentBench knowledgegraph, function-call form). The agent probes a generated
 * knowledge graph with the seven AgentBench tools; every set-valued result becomes a variable
 * #0, #1, ... AgentBench FC ends with a plain "Final Answer: #k" message, but here a turn
 * without a tool call is a validation failure (shared/env/session.ts), so the answer is given
 * with an eighth tool, `final_answer(variable)`. Reward 1 on an exact set match with the gold
 * answer; F1 is kept as the score.
 */

/** AgentBench KG turn limit. */
export const KG_MAX_TURNS = 15;
/** Entity names shown per variable before the rest are only counted. */
const MAX_NAMES_SHOWN = 8;

// Descriptions are kept short: the tool schemas go into every prompt of a small-context model.
const Variable = z.string().min(1);
/** Arguments of get_relations, get_attributes, count and final_answer. */
export const VariableArgs = z.object({ variable: Variable });
/** Arguments of get_neighbors. */
export const RelationArgs = z.object({ variable: Variable, relation: z.string().min(1) });
/** Arguments of intersection. */
export const IntersectionArgs = z.object({ variable1: Variable, variable2: Variable });
/** Arguments of argmax and argmin. */
export const AttributeArgs = z.object({ variable: Variable, attribute: z.string().min(1) });

const TOOLS: readonly ToolDefinition[] = [
  { name: "get_relations", description: "Lists the relations of an entity or variable.", parameters: VariableArgs },
  {
    name: "get_neighbors",
    description: "New variable: the entities linked to the variable by the relation.",
    parameters: RelationArgs,
  },
  {
    name: "intersection",
    description: "New variable: the entities in both variables (same type).",
    parameters: IntersectionArgs,
  },
  { name: "get_attributes", description: "Lists the numerical attributes of a variable.", parameters: VariableArgs },
  {
    name: "argmax",
    description: "New variable: the entity with the largest attribute value.",
    parameters: AttributeArgs,
  },
  {
    name: "argmin",
    description: "New variable: the entity with the smallest attribute value.",
    parameters: AttributeArgs,
  },
  { name: "count", description: "New variable: the number of entities in the variable.", parameters: VariableArgs },
  {
    name: "final_answer",
    description: "Answers with a variable (e.g. #3) and ends the task.",
    parameters: VariableArgs,
  },
];

const SYSTEM_PROMPT =
  "You answer questions with a knowledge base. Use the tools to explore it: each get_neighbors, intersection, argmax, argmin " +
  "or count result is stored as a variable #0, #1, ... that later calls can use. When a variable holds the answer, call " +
  "final_answer with it (e.g. '#3'). One tool call per turn; at most 15 turns.";

/** Exact-match reward and F1 of a predicted set against the gold set. */
export function scoreAnswer(predicted: readonly string[], gold: readonly string[]): { exact: boolean; f1: number } {
  const p = new Set(predicted);
  const g = new Set(gold);
  const tp = [...p].filter((x) => g.has(x)).length;
  const exact = tp === p.size && tp === g.size;
  if (tp === 0) return { exact, f1: exact ? 1 : 0 };
  const precision = tp / p.size;
  const recall = tp / g.size;
  return { exact, f1: (2 * precision * recall) / (precision + recall) };
}

function describe(id: number, value: KgValue): string {
  if (value.type === "number") return `variable #${id}, which is a number: ${value.members[0]}`;
  const shown = value.members.slice(0, MAX_NAMES_SHOWN).join(", ");
  const rest = value.members.length > MAX_NAMES_SHOWN ? ` and ${value.members.length - MAX_NAMES_SHOWN} more` : "";
  return `variable #${id}, which are instances of ${value.type}: ${value.members.length === 0 ? "(none)" : shown + rest}`;
}

class KgEpisode implements Episode {
  readonly messages: ChatMessage[];
  private readonly variables: KgValue[] = [];

  constructor(private readonly instance: KgInstance) {
    this.messages = [
      { role: "system", content: SYSTEM_PROMPT },
      { role: "user", content: `Question: ${instance.question}\nEntities: [${instance.entities.join(", ")}]` },
    ];
  }

  private variableList(): string {
    return this.variables.length === 0 ? "no variables yet" : `variables #0 to #${this.variables.length - 1} exist`;
  }

  /** Resolves an argument to a value, or explains why it cannot. */
  private resolve(raw: string): KgValue | string {
    const text = raw.trim();
    const variable = /^#(\d+)$/.exec(text);
    if (variable) {
      const value = this.variables[Number(variable[1])];
      return value ?? `Error: variable ${text} does not exist (${this.variableList()}).`;
    }
    return (
      entityValue(this.instance.graph, text) ??
      `Error: "${text}" is neither a variable nor a known entity. Entities of the question: [${this.instance.entities.join(", ")}]; ${this.variableList()}.`
    );
  }

  private store(value: KgValue): StepResult {
    this.variables.push(value);
    return { observation: describe(this.variables.length - 1, value) };
  }

  private entities(raw: string, tool: string): KgValue | StepResult {
    const value = this.resolve(raw);
    if (typeof value === "string") return { observation: value };
    if (value.type === "number") return { observation: `Error: ${raw.trim()} is a number; ${tool} needs entities.` };
    return value;
  }

  async call(tool: string, args: unknown): Promise<StepResult> {
    const graph = this.instance.graph;
    switch (tool) {
      case "get_relations": {
        const { variable } = VariableArgs.parse(args);
        const value = this.entities(variable, tool);
        if ("observation" in value) return value;
        return { observation: `[${graph.relationsOf(value.members).join(", ")}]` };
      }
      case "get_neighbors": {
        const { variable, relation } = RelationArgs.parse(args);
        const value = this.entities(variable, tool);
        if ("observation" in value) return value;
        const relations = graph.relationsOf(value.members);
        const next = relations.includes(relation.trim()) ? neighborsOf(graph, value, relation.trim()) : undefined;
        if (!next) {
          return {
            observation: `Error: relation "${relation}" does not leave ${variable.trim()}. Its relations: [${relations.join(", ")}]`,
          };
        }
        return this.store(next);
      }
      case "intersection": {
        const { variable1, variable2 } = IntersectionArgs.parse(args);
        const a = this.entities(variable1, tool);
        if ("observation" in a) return a;
        const b = this.entities(variable2, tool);
        if ("observation" in b) return b;
        const both = intersect(a, b);
        if (!both) {
          return {
            observation: `Error: intersection(${variable1.trim()}, ${variable2.trim()}) cannot be executed: the two variables are not of the same type (${a.type} vs ${b.type}).`,
          };
        }
        return this.store(both);
      }
      case "get_attributes": {
        const { variable } = VariableArgs.parse(args);
        const value = this.entities(variable, tool);
        if ("observation" in value) return value;
        return { observation: `[${attributesOf(value).join(", ")}]` };
      }
      case "argmax":
      case "argmin": {
        const { variable, attribute } = AttributeArgs.parse(args);
        const value = this.entities(variable, tool);
        if ("observation" in value) return value;
        if (value.members.length === 0) return { observation: `Error: ${variable.trim()} is empty.` };
        const best = extreme(graph, value, attribute.trim(), tool === "argmax");
        if (!best) {
          return {
            observation: `Error: "${attribute}" is not an attribute of ${variable.trim()}. Its attributes: [${attributesOf(value).join(", ")}]`,
          };
        }
        return this.store(best);
      }
      case "count": {
        const { variable } = VariableArgs.parse(args);
        const value = this.entities(variable, tool);
        if ("observation" in value) return value;
        return this.store(countOf(value));
      }
      case "final_answer": {
        const { variable } = VariableArgs.parse(args);
        const match = /^#(\d+)$/.exec(variable.trim());
        const value = match ? this.variables[Number(match[1])] : undefined;
        if (!value) {
          return {
            observation: `Error: the final answer must be an existing variable such as #0 (${this.variableList()}).`,
          };
        }
        const { exact, f1 } = scoreAnswer(value.members, this.instance.answer);
        return {
          observation: `Final answer ${variable.trim()} submitted.`,
          reward: { reward: exact ? 1 : 0, score: f1, metrics: { success: exact ? 1 : 0, f1 } },
          finish: "completed",
        };
      }
      default:
        throw new Error(`kg has no tool ${tool}`);
    }
  }
}

function attributesOf(value: KgValue): string[] {
  return ATTRIBUTES.filter((a) => a.type === value.type).map((a) => a.name);
}

/** Builds the KG task definition. */
export function createKgTask(): TaskDefinition {
  return {
    name: "kg",
    tools: TOOLS,
    maxTurns: KG_MAX_TURNS,
    splits: KG_SPLITS,
    async start(index: number): Promise<Episode> {
      return new KgEpisode(generateKgInstance(index));
    },
  };
}
