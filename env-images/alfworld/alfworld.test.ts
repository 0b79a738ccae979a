import { describe, expect, it } from "vitest";
import { EpisodeSession, runScripted, scriptedStats, toolSpecs } from "../../shared/env/session.ts";
import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage } from "../../shared/protocol/openai.ts";
import { rngFor } from "../common/rng.ts";
import { loadTaskModule } from "../registry.ts";
import { alfworldExpert, alfworldRandom } from "./agents.ts";
import { AlfEngine, NOTHING_HAPPENS } from "./engine.ts";
import { alfworldTask } from "./task.ts";
import { ALFWORLD_SPLITS, type AlfInstance, type Goal, generateAlfInstance, TASK_TYPES } from "./world.ts";

const signal = new AbortController().signal;

function act(action: string, id = "c1"): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id, type: "function", function: { name: "take_action", arguments: JSON.stringify({ action }) } }],
  };
}

async function session(index: number) {
  const s = new EpisodeSession(alfworldTask, await alfworldTask.start(index, signal));
  return {
    s,
    async step(action: string) {
      const turn = await s.interact(act(action), signal);
      return { ...turn, text: turn.messages[0]?.content ?? "" };
    },
  };
}

function household(goal: Goal, placement: Record<string, string> = {}): AlfInstance {
  return {
    index: 0,
    scene: "kitchen",
    receptacles: ["cabinet 1", "countertop 1", "desk 1", "fridge 1", "microwave 1", "shelf 1", "sinkbasin 1"],
    placement: { "apple 1": "countertop 1", "bread 1": "countertop 1", "mug 1": "cabinet 1", ...placement },
    goal,
  };
}

function run(engine: AlfEngine, actions: readonly string[]) {
  return actions.map((a) => engine.step(a));
}

function fingerprint(instance: AlfInstance): string {
  return JSON.stringify([instance.receptacles, instance.placement, instance.goal]);
}

describe("alfworld generator", () => {
  it("is deterministic by index and varies across indices", () => {
    for (const index of [0, 5, 9_999, 10_000, 10_499]) {
      expect(fingerprint(generateAlfInstance(index))).toBe(fingerprint(generateAlfInstance(index)));
    }
    const distinct = new Set(Array.from({ length: 100 }, (_, i) => fingerprint(generateAlfInstance(i))));
    expect(distinct.size).toBe(100);
  });

  it("has disjoint train and test splits of the required sizes, with no shared instance", () => {
    const { train, test } = alfworldTask.splits;
    expect(train.end - train.start).toBeGreaterThanOrEqual(10_000);
    expect(test.end - test.start).toBeGreaterThanOrEqual(500);
    expect(train.end <= test.start || test.end <= train.start).toBe(true);
    const trainPrints = new Set<string>();
    for (let i = train.start; i < train.start + 3000; i++) trainPrints.add(fingerprint(generateAlfInstance(i)));
    for (let i = test.start; i < test.end; i++)
      expect(trainPrints.has(fingerprint(generateAlfInstance(i)))).toBe(false);
  });

  it("covers the six task types and four rooms; no goal holds at the start; rooms stay small", () => {
    const types = new Set<string>();
    const scenes = new Set<string>();
    for (let i = ALFWORLD_SPLITS.test.start; i < ALFWORLD_SPLITS.test.end; i++) {
      const instance = generateAlfInstance(i);
      types.add(instance.goal.type);
      scenes.add(instance.scene);
      expect(new AlfEngine(instance).goalReached()).toBe(false);
      expect(instance.receptacles.length).toBeLessThanOrEqual(12);
      expect(new AlfEngine(instance).initialObservation()).toContain(`Your task is to: ${instance.goal.text}`);
    }
    expect([...types].sort()).toEqual([...TASK_TYPES].sort());
    expect([...scenes].sort()).toEqual(["bathroom", "bedroom", "kitchen", "livingroom"]);
  });

  it("rejects indices outside the splits", async () => {
    expect(() => generateAlfInstance(-1)).toThrow(RangeError);
    expect(() => generateAlfInstance(ALFWORLD_SPLITS.test.end)).toThrow(/outside the task's indices/);
    await expect(alfworldTask.start(2.5, signal)).rejects.toThrow(RangeError);
  });
});

describe("alfworld engine", () => {
  const clean: Goal = {
    type: "pick_clean_then_place",
    object: "apple",
    receptacle: "fridge",
    text: "put a clean apple in fridge.",
  };

  it("answers ALFWorld's text for moving, opening, taking and putting", () => {
    const engine = new AlfEngine(household(clean));
    expect(engine.initialObservation()).toBe(
      "You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a countertop 1, a desk 1, a fridge 1, a microwave 1, a shelf 1, and a sinkbasin 1.\n\nYour task is to: put a clean apple in fridge.",
    );
    const [arrive, take, inventory, toCabinet, open, put, close] = run(engine, [
      "go to countertop 1",
      "take apple 1 from countertop 1",
      "inventory",
      "go to cabinet 1",
      "open cabinet 1",
      "put apple 1 in/on cabinet 1",
      "close cabinet 1",
    ]);
    expect(arrive?.observation).toBe(
      "You arrive at countertop 1. On the countertop 1, you see a apple 1, and a bread 1.",
    );
    expect(take?.observation).toBe("You pick up the apple 1 from the countertop 1.");
    expect(inventory?.observation).toBe("You are carrying: a apple 1.");
    expect(toCabinet?.observation).toBe("You arrive at cabinet 1. The cabinet 1 is closed.");
    expect(open?.observation).toBe("You open the cabinet 1. The cabinet 1 is open. In it, you see a mug 1.");
    expect(put?.observation).toBe("You put the apple 1 in/on the cabinet 1.");
    expect(close?.observation).toBe("You close the cabinet 1.");
    expect(engine.step("look").observation).toBe("You are facing the cabinet 1. The cabinet 1 is closed.");
    expect(engine.step("inventory").observation).toBe("You are not carrying anything.");
  });

  it("says Nothing happens. for impossible or unknown actions and changes nothing", () => {
    const engine = new AlfEngine(household(clean));
    const impossible = [
      "take apple 1 from countertop 1", // not there yet
      "go to garage 1", // no such receptacle
      "open countertop 1", // not here, not openable
      "put apple 1 in/on countertop 1", // not holding it
      "dance",
      "",
    ];
    for (const action of impossible)
      expect(engine.step(action)).toMatchObject({ observation: NOTHING_HAPPENS, valid: false });
    run(engine, ["go to countertop 1"]);
    expect(engine.step("go to countertop 1").observation).toBe(NOTHING_HAPPENS);
    expect(engine.step("open countertop 1").observation).toBe(NOTHING_HAPPENS);
    run(engine, ["take apple 1 from countertop 1"]);
    expect(engine.step("take bread 1 from countertop 1").observation).toBe(NOTHING_HAPPENS); // hands full
    expect(engine.step("clean apple 1 with countertop 1").observation).toBe(NOTHING_HAPPENS); // not a sink
    run(engine, ["go to cabinet 1"]);
    expect(engine.step("take mug 1 from cabinet 1").observation).toBe(NOTHING_HAPPENS); // closed
    expect(engine.step("put apple 1 in/on cabinet 1").observation).toBe(NOTHING_HAPPENS); // closed
    expect(engine.holding).toBe("apple 1");
  });

  it("cleans, heats and cools with the right appliance only; the goal holds once the state and place match", () => {
    const engine = new AlfEngine(household(clean));
    run(engine, ["go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1"]);
    expect(engine.step("heat apple 1 with microwave 1").observation).toBe(
      "You heat the apple 1 using the microwave 1.",
    );
    expect(engine.step("clean apple 1 with microwave 1").observation).toBe(NOTHING_HAPPENS);
    run(engine, ["go to fridge 1", "open fridge 1"]);
    const dirty = engine.step("put apple 1 in/on fridge 1");
    expect(dirty.won).toBe(false); // hot but not clean
    run(engine, ["take apple 1 from fridge 1", "go to sinkbasin 1"]);
    expect(engine.step("clean apple 1 with sinkbasin 1").observation).toBe(
      "You clean the apple 1 using the sinkbasin 1.",
    );
    expect(engine.step("examine apple 1").observation).toBe("This is a clean, hot apple 1.");
    run(engine, ["go to fridge 1"]);
    expect(engine.step("put apple 1 on fridge 1")).toMatchObject({ won: true, valid: true });
    expect(engine.step("cool apple 1 with fridge 1").valid).toBe(false);
  });

  it("examine in light: holding the object where a lamp is on", () => {
    const look: Goal = {
      type: "look_at_obj_in_light",
      object: "mug",
      lamp: "desklamp 1",
      text: "look at mug under the desklamp.",
    };
    const engine = new AlfEngine(household(look, { "desklamp 1": "desk 1" }));
    run(engine, ["go to desk 1"]);
    expect(engine.step("use desklamp 1")).toMatchObject({ observation: "You turn on the desklamp 1.", won: false });
    expect(engine.step("take desklamp 1 from desk 1").valid).toBe(false);
    run(engine, ["go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1"]);
    expect(engine.goalReached()).toBe(false);
    expect(engine.step("go to desk 1").won).toBe(true);
    expect(engine.step("use desklamp 1").observation).toBe("You turn off the desklamp 1.");
    expect(engine.goalReached()).toBe(false);
  });

  it("pick two: both objects in one receptacle of the goal kind", () => {
    const two: Goal = { type: "pick_two_obj", object: "apple", receptacle: "shelf", text: "put two apple in shelf." };
    const engine = new AlfEngine(household(two, { "apple 2": "cabinet 1" }));
    const steps = run(engine, [
      "go to countertop 1",
      "take apple 1 from countertop 1",
      "go to shelf 1",
      "put apple 1 in/on shelf 1",
      "go to cabinet 1",
      "open cabinet 1",
      "take apple 2 from cabinet 1",
      "go to shelf 1",
      "put apple 2 in/on shelf 1",
    ]);
    expect(steps.map((s) => s.won)).toEqual([false, false, false, false, false, false, false, false, true]);
  });
});

describe("alfworld episodes", () => {
  it("publishes take_action(action) with a 20-turn limit", () => {
    const [spec] = toolSpecs(alfworldTask);
    expect(spec?.function.name).toBe("take_action");
    expect(spec?.function.parameters).toMatchObject({ required: ["action"], additionalProperties: false });
    expect(alfworldTask.maxTurns).toBe(20);
  });

  it("opens with the room and the goal", async () => {
    const episode = await alfworldTask.start(ALFWORLD_SPLITS.test.start, signal);
    const user = episode.messages.find((m) => m.role === "user");
    expect(user?.content).toMatch(/^Here is your task\. You are in the middle of a room\. .*\n\nYour task is to: /s);
  });

  it("reaching the goal completes the episode with reward 1", async () => {
    const index = ALFWORLD_SPLITS.test.start;
    const result = await runScripted(alfworldTask, index, alfworldExpert);
    expect([result.status, result.reward]).toEqual(["completed", 1]);
    expect(result.turns).toBeLessThanOrEqual(20);
  });

  it("three identical actions in a row end the episode as an invalid action", async () => {
    const { step } = await session(ALFWORLD_SPLITS.test.start);
    expect((await step("look")).status).toBe("running");
    expect((await step("Look.")).status).toBe("running");
    const third = await step("  look ");
    expect([third.status, third.reward, third.finish]).toEqual(["agent invalid action", 0, true]);
    expect(third.text).toContain("repeated the same action 3 times");
  });

  it("two identical actions then another one keep the episode going; so do impossible actions", async () => {
    const { step } = await session(ALFWORLD_SPLITS.test.start);
    await step("inventory");
    await step("inventory");
    expect((await step("look")).status).toBe("running");
    const nonsense = await step("fly to the moon");
    expect([nonsense.text, nonsense.status]).toEqual([NOTHING_HAPPENS, "running"]);
    await step("fly to the moon");
    expect((await step("fly to the moon")).status).toBe("agent invalid action");
  });

  it("stops at 20 turns with task limit reached and reward 0", async () => {
    const { step } = await session(ALFWORLD_SPLITS.test.start);
    let last = await step("look");
    for (let turn = 1; turn < 20; turn++) last = await step(turn % 2 === 0 ? "look" : "inventory");
    expect([last.status, last.reward, last.metrics.turns]).toEqual(["task limit reached", 0, 20]);
  });

  it("rejects calls that break the tool schema with a message naming the field", async () => {
    const { s } = await session(ALFWORLD_SPLITS.test.start);
    const bad = await s.interact(
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "x", type: "function", function: { name: "take_action", arguments: '{"act":"look"}' } }],
      },
      signal,
    );
    expect(bad.status).toBe("agent validation failed");
    expect(bad.messages[0]?.content).toMatch(/invalid arguments for take_action: .*action/);
    const unknown = await (await session(ALFWORLD_SPLITS.test.start)).s.interact(
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "y", type: "function", function: { name: "go", arguments: "{}" } }],
      },
      signal,
    );
    expect(unknown.status).toBe("agent invalid action");
  });
});

describe("alfworld agents", () => {
  const test = Array.from({ length: 500 }, (_, i) => ALFWORLD_SPLITS.test.start + i);

  const successRate = async (agent: ScriptedAgent, indices: readonly number[]) =>
    (await scriptedStats(alfworldTask, agent, indices)).successRate;

  it("the expert solves at least 99% of the test split; the random baseline far fewer", async () => {
    expect(await successRate(alfworldExpert, test)).toBeGreaterThanOrEqual(0.99);
    expect(await successRate(alfworldRandom, test.slice(0, 200))).toBeLessThan(0.15);
  });

  it("spreads difficulty: a policy mixing expert and random turns wins often but not always", async () => {
    // Each turn goes to the expert or the random agent by a seeded coin (cross-policy style);
    // the expert picks up from whatever state the random turns left.
    const mixed: ScriptedAgent = {
      name: "mixed",
      act(messages, index) {
        const turn = messages.filter((m) => m.role === "assistant").length;
        const coin = rngFor("alfworld-test", index * 64 + turn, "mix").next();
        return (coin < 0.6 ? alfworldExpert : alfworldRandom).act(messages, index);
      },
    };
    const rate = await successRate(mixed, test.slice(0, 200));
    expect(rate).toBeGreaterThan(0.2);
    expect(rate).toBeLessThan(0.97);
  });

  it("is registered as alfworld", async () => {
    const module = await loadTaskModule("alfworld");
    expect(module.task.name).toBe("alfworld");
    expect(module.expert.name).toBe("alfworld-expert");
  });
});
