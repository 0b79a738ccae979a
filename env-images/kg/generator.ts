import { type Rng, rngFor } from "../common/rng.ts";
import {
  ATTRIBUTES,
  type EntityType,
  generateGraph,
  type KnowledgeGraph,
  RELATION_BY_NAME,
  RELATIONS,
  type RelationSchema,
} from "./graph.ts";

/**
 * KG instances: a generated graph plus a question whose answer is the result of a small program
 * over the seven KG tools (one or two hops, intersection, count, argmax/argmin), as in
 * AgentBench's KG task. The gold answer is that program executed on the graph.
 */

/** A value an agent can hold in a variable: a set of entities of one type, or a number. */
export interface KgValue {
  readonly type: EntityType | "number";
  readonly members: readonly string[];
}

/** A program argument: an entity of the question or the result of an earlier step. */
export type Ref = { readonly entity: string } | { readonly step: number };
/** One tool-shaped step of a question's program. */
export type Step =
  | { readonly op: "get_neighbors"; readonly from: Ref; readonly relation: string }
  | { readonly op: "intersection"; readonly a: Ref; readonly b: Ref }
  | { readonly op: "argmax" | "argmin"; readonly from: Ref; readonly attribute: string }
  | { readonly op: "count"; readonly from: Ref };

/** Question families, from one hop to superlatives over two hops. */
export const KG_KINDS = ["one_hop", "two_hop", "intersection", "count", "superlative"] as const;
export type KgKind = (typeof KG_KINDS)[number];
const KIND_WEIGHTS = [0.2, 0.2, 0.2, 0.15, 0.25];

/** One generated graph plus its question, program and gold answer. */
export interface KgInstance {
  readonly index: number;
  readonly kind: KgKind;
  readonly graph: KnowledgeGraph;
  readonly question: string;
  /** Entities named in the question (AgentBench's "Entities: [...]"). */
  readonly entities: readonly string[];
  /** The program whose last step is the answer. */
  readonly program: readonly Step[];
  readonly answer: readonly string[];
}

/** Train and test index ranges (disjoint). */
export const KG_SPLITS = { train: { start: 0, end: 10_000 }, test: { start: 10_000, end: 10_500 } } as const;

/** Value of an entity name as a one-element set. */
export function entityValue(graph: KnowledgeGraph, name: string): KgValue | undefined {
  const entity = graph.find(name);
  return entity ? { type: entity.type, members: [entity.name] } : undefined;
}

/** Entities linked to `value` by `relation` (undefined when the relation does not fit the type). */
export function neighborsOf(graph: KnowledgeGraph, value: KgValue, relation: string): KgValue | undefined {
  const schema = RELATION_BY_NAME.get(relation);
  if (!schema || schema.domain !== value.type) return undefined;
  return { type: schema.range, members: graph.neighbors(value.members, relation) };
}

/** Common entities of two same-typed values (undefined when the types differ). */
export function intersect(a: KgValue, b: KgValue): KgValue | undefined {
  if (a.type !== b.type || a.type === "number") return undefined;
  const right = new Set(b.members);
  return { type: a.type, members: a.members.filter((m) => right.has(m)) };
}

/** Entities of `value` with the largest (or smallest) `attribute`; all of them on a tie. */
export function extreme(graph: KnowledgeGraph, value: KgValue, attribute: string, max: boolean): KgValue | undefined {
  const schema = ATTRIBUTES.find((a) => a.name === attribute);
  if (!schema || schema.type !== value.type || value.members.length === 0) return undefined;
  const scored = value.members.map((name) => ({ name, v: graph.entity(name)?.attributes[attribute] ?? Number.NaN }));
  const best = max ? Math.max(...scored.map((s) => s.v)) : Math.min(...scored.map((s) => s.v));
  return { type: value.type, members: scored.filter((s) => s.v === best).map((s) => s.name) };
}

/** The number of entities of `value`, as a number-valued variable. */
export function countOf(value: KgValue): KgValue {
  return { type: "number", members: [String(value.members.length)] };
}

/** Executes a program; the last value is the answer. */
export function runProgram(graph: KnowledgeGraph, program: readonly Step[]): KgValue[] {
  const values: KgValue[] = [];
  const resolve = (ref: Ref): KgValue => {
    const value = "entity" in ref ? entityValue(graph, ref.entity) : values[ref.step];
    if (!value) throw new Error(`unresolvable reference ${JSON.stringify(ref)}`);
    return value;
  };
  for (const step of program) {
    let value: KgValue | undefined;
    switch (step.op) {
      case "get_neighbors":
        value = neighborsOf(graph, resolve(step.from), step.relation);
        break;
      case "intersection":
        value = intersect(resolve(step.a), resolve(step.b));
        break;
      case "argmax":
      case "argmin":
        value = extreme(graph, resolve(step.from), step.attribute, step.op === "argmax");
        break;
      case "count":
        value = countOf(resolve(step.from));
        break;
    }
    if (!value) throw new Error(`step ${JSON.stringify(step)} cannot run`);
    values.push(value);
  }
  return values;
}

interface Draft {
  readonly program: Step[];
  readonly phrase: string;
  readonly entities: string[];
}

function phraseOf(relation: RelationSchema, inner: string): string {
  return relation.phrase.replace("{x}", inner);
}

/** A one- or two-hop path from a random entity with a non-empty end set of at least `minSize`. */
function path(
  rng: Rng,
  graph: KnowledgeGraph,
  hops: 1 | 2,
  minSize: number,
  first: RelationSchema = rng.pick(RELATIONS),
): Draft | undefined {
  const start = rng.pick(graph.ofType(first.domain));
  const program: Step[] = [{ op: "get_neighbors", from: { entity: start.name }, relation: first.name }];
  let phrase = phraseOf(first, start.name);
  if (hops === 2) {
    const options = RELATIONS.filter((r) => r.domain === first.range && r.name !== first.inverse);
    if (options.length === 0) return undefined;
    const second = rng.pick(options);
    program.push({ op: "get_neighbors", from: { step: 0 }, relation: second.name });
    phrase = phraseOf(second, phrase);
  }
  const values = runProgram(graph, program);
  if (values.some((v) => v.members.length === 0) || values.at(-1)!.members.length < minSize) return undefined;
  return { program, phrase, entities: [start.name] };
}

function draftQuestion(rng: Rng, graph: KnowledgeGraph, kind: KgKind): { draft: Draft; question: string } | undefined {
  switch (kind) {
    case "one_hop":
    case "two_hop": {
      const draft = path(rng, graph, kind === "one_hop" ? 1 : 2, 1);
      return draft && { draft, question: `What are ${draft.phrase}?` };
    }
    case "count": {
      const draft = path(rng, graph, rng.chance(0.5) ? 1 : 2, 1);
      if (!draft) return undefined;
      draft.program.push({ op: "count", from: { step: draft.program.length - 1 } });
      return { draft, question: `What is the number of ${draft.phrase.replace(/^the /, "")}?` };
    }
    case "superlative": {
      const draft = path(rng, graph, rng.chance(0.6) ? 1 : 2, 2);
      if (!draft) return undefined;
      const last = runProgram(graph, draft.program).at(-1)!;
      const attribute = rng.pick(ATTRIBUTES.filter((a) => a.type === last.type));
      const max = rng.chance(0.5);
      draft.program.push({
        op: max ? "argmax" : "argmin",
        from: { step: draft.program.length - 1 },
        attribute: attribute.name,
      });
      return {
        draft,
        question: `Among ${draft.phrase}, which one has the ${max ? "highest" : "lowest"} ${attribute.label}?`,
      };
    }
    case "intersection": {
      const leftRelation = rng.pick(RELATIONS);
      const rightRelation = rng.pick(RELATIONS.filter((r) => r.range === leftRelation.range));
      const left = path(rng, graph, 1, 2, leftRelation);
      const right = path(rng, graph, 1, 2, rightRelation);
      if (!left || !right || left.entities[0] === right.entities[0]) return undefined;
      const a = runProgram(graph, left.program)[0]!;
      const b = runProgram(graph, right.program)[0]!;
      const both = intersect(a, b);
      if (!both || both.members.length === 0 || both.members.length >= Math.min(a.members.length, b.members.length))
        return undefined;
      const rightStep = right.program[0]!;
      const program: Step[] = [left.program[0]!, rightStep, { op: "intersection", a: { step: 0 }, b: { step: 1 } }];
      return {
        draft: { program, phrase: "", entities: [left.entities[0]!, right.entities[0]!] },
        question: `Which entities are both among ${left.phrase} and among ${right.phrase}?`,
      };
    }
  }
}

/** Builds instance `index`; a pure function of the index. */
export function generateKgInstance(index: number): KgInstance {
  const rng = rngFor("kg", index);
  const graph = generateGraph(rng);
  const drawn = KG_KINDS[rng.weighted(KIND_WEIGHTS)]!;
  // Random drafts are cheap; retry until one meets the kind's constraints (a graph where the
  // drawn kind has no valid question falls back to a one-hop question).
  for (let attempt = 0; attempt < 1000; attempt++) {
    const kind = attempt < 500 ? drawn : "one_hop";
    const drafted = draftQuestion(rng, graph, kind);
    if (!drafted) continue;
    const answer = runProgram(graph, drafted.draft.program).at(-1)!.members;
    return {
      index,
      kind,
      graph,
      question: drafted.question,
      entities: drafted.draft.entities,
      program: drafted.draft.program,
      answer,
    };
  }
  throw new Error(`kg instance ${index}: no question found`);
}
