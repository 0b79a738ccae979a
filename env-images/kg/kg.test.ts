import { describe, expect, it } from "vitest";
import { EpisodeSession, scriptedStats } from "../../shared/env/session.ts";
import type { Episode, StepResult } from "../../shared/env/task.ts";
import { callTool } from "../common/agent.ts";
import { generateKgInstance, KG_KINDS, type KgKind } from "./generator.ts";
import { taskModule } from "./index.ts";
import { scoreAnswer } from "./task.ts";

const task = taskModule.task;
const never = new AbortController().signal;

function firstIndexOfKind(kind: KgKind): number {
  for (let i = 0; i < 1000; i++) if (generateKgInstance(i).kind === kind) return i;
  throw new Error(`no instance of kind ${kind}`);
}

async function play(index: number, calls: Array<[string, Record<string, string>]>): Promise<StepResult[]> {
  const episode: Episode = await task.start(index, never);
  const results: StepResult[] = [];
  for (const [tool, args] of calls) results.push(await episode.call(tool, args, never));
  return results;
}

describe("kg generator", () => {
  it("is deterministic by index and varies across indices", () => {
    const a = generateKgInstance(7);
    const b = generateKgInstance(7);
    expect(a.question).toBe(b.question);
    expect(a.answer).toEqual(b.answer);
    expect(a.graph.relationsOf(a.entities)).toEqual(b.graph.relationsOf(b.entities));
    const questions = new Set(Array.from({ length: 50 }, (_, i) => generateKgInstance(i).question));
    expect(questions.size).toBeGreaterThan(45);
  });

  it("has disjoint train and test splits of the required sizes and every question kind in test", () => {
    const { train, test } = task.splits;
    expect(train.end - train.start).toBeGreaterThanOrEqual(10_000);
    expect(test.end - test.start).toBeGreaterThanOrEqual(500);
    expect(train.end <= test.start || test.end <= train.start).toBe(true);
    const kinds = new Set<string>();
    for (let i = test.start; i < test.end; i++) kinds.add(generateKgInstance(i).kind);
    expect([...kinds].sort()).toEqual([...KG_KINDS].sort());
  });
});

describe("kg tools", () => {
  it("walks relations into numbered variables and answers by the final variable", async () => {
    const index = firstIndexOfKind("two_hop");
    const instance = generateKgInstance(index);
    const start = instance.entities[0]!;
    const [first, second] = instance.program.map((s) => (s.op === "get_neighbors" ? s.relation : ""));
    const results = await play(index, [
      ["get_relations", { variable: start }],
      ["get_neighbors", { variable: start, relation: first! }],
      ["get_relations", { variable: "#0" }],
      ["get_neighbors", { variable: "#0", relation: second! }],
      ["count", { variable: "#1" }],
      ["final_answer", { variable: "#1" }],
    ]);
    expect(results[0]!.observation).toMatch(/^\[.*\]$/);
    expect(results[0]!.observation).toContain(first!);
    expect(results[1]!.observation).toMatch(/^variable #0, which are instances of \w+: /);
    expect(results[3]!.observation).toContain("variable #1");
    for (const name of instance.answer) expect(results[3]!.observation).toContain(name);
    expect(results[4]!.observation).toBe(`variable #2, which is a number: ${instance.answer.length}`);
    expect(results[5]).toMatchObject({ finish: "completed", reward: { reward: 1, score: 1 } });
  });

  it("explains unknown variables, unknown entities, wrong relations, type clashes and attributes", async () => {
    const index = firstIndexOfKind("one_hop");
    const instance = generateKgInstance(index);
    const start = instance.entities[0]!;
    const results = await play(index, [
      ["get_relations", { variable: "#4" }],
      ["get_relations", { variable: "Nobody Atall" }],
      ["get_neighbors", { variable: start, relation: "film.no_such_relation" }],
      ["get_attributes", { variable: start }],
      ["argmax", { variable: start, attribute: "made.up" }],
      ["count", { variable: start }],
      ["get_relations", { variable: "#0" }],
      ["final_answer", { variable: "#9" }],
    ]);
    expect(results[0]!.observation).toBe("Error: variable #4 does not exist (no variables yet).");
    expect(results[1]!.observation).toContain(
      `is neither a variable nor a known entity. Entities of the question: [${start}]`,
    );
    expect(results[2]!.observation).toContain('Error: relation "film.no_such_relation" does not leave');
    expect(results[3]!.observation).toMatch(/^\[\w+\.\w+(, \w+\.\w+)*\]$/);
    expect(results[4]!.observation).toContain('Error: "made.up" is not an attribute of');
    expect(results[5]!.observation).toBe("variable #0, which is a number: 1");
    expect(results[6]!.observation).toBe("Error: #0 is a number; get_relations needs entities.");
    expect(results[7]!.observation).toContain("must be an existing variable");
    expect(results.every((r) => r.finish === undefined)).toBe(true);
  });

  it("refuses to intersect variables of different types", async () => {
    const index = firstIndexOfKind("intersection");
    const instance = generateKgInstance(index);
    const step = instance.program[0]!;
    if (step.op !== "get_neighbors" || !("entity" in step.from)) throw new Error("unexpected program");
    const results = await play(index, [
      ["get_neighbors", { variable: step.from.entity, relation: step.relation }],
      ["intersection", { variable1: "#0", variable2: step.from.entity }],
    ]);
    expect(results[1]!.observation).toMatch(/not of the same type \(\w+ vs \w+\)/);
  });

  it("scores exact set match as reward and F1 as score", () => {
    expect(scoreAnswer(["a", "b"], ["b", "a"])).toEqual({ exact: true, f1: 1 });
    expect(scoreAnswer(["a"], ["a", "b"])).toEqual({ exact: false, f1: 2 / 3 });
    expect(scoreAnswer(["c"], ["a"])).toEqual({ exact: false, f1: 0 });
  });

  it("ends with task limit reached after 15 turns without an answer", async () => {
    const index = firstIndexOfKind("one_hop");
    const start = generateKgInstance(index).entities[0]!;
    const session = new EpisodeSession(task, await task.start(index, never));
    let status = "running";
    for (let turn = 0; turn < 20 && status === "running"; turn++) {
      status = (await session.interact(callTool("get_relations", { variable: start }, turn), never)).status;
    }
    expect(status).toBe("task limit reached");
    expect(session.turnCount).toBe(15);
  });
});

describe("kg agents", () => {
  it("the expert solves at least 99% of 200 test instances; the random baseline far fewer", async () => {
    const test = Array.from({ length: 200 }, (_, i) => task.splits.test.start + i);
    expect((await scriptedStats(task, taskModule.expert, test)).successRate).toBeGreaterThanOrEqual(0.99);
    expect((await scriptedStats(task, taskModule.random, test.slice(0, 100))).successRate).toBeLessThan(0.25);
  });
});
