import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { rngFor } from "../common/rng.ts";
import { AlfEngine } from "./engine.ts";
import { ALFWORLD_TASK_NAME, APPLIANCE, generateAlfInstance, kindOf } from "./world.ts";

/**
 * Scripted alfworld agents; both act only through take_action. The expert knows how instances
 * are generated: it rebuilds the household, replays the actions already taken in the
 * conversation (its own or another policy's), and plans the next step from that state, so it can
 * take over any partial trajectory. The random agent only knows what the observations told it.
 */

function takeAction(turn: number, action: string): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: [
      {
        id: `call_${turn}`,
        type: "function",
        function: { name: "take_action", arguments: JSON.stringify({ action }) },
      },
    ],
  };
}

function turnsSoFar(messages: readonly ChatMessage[]): number {
  return messages.filter((m) => m.role === "assistant").length;
}

/** The actions of every take_action call in the conversation, oldest first. */
export function actionsTaken(messages: readonly ChatMessage[]): string[] {
  const actions: string[] = [];
  for (const message of messages) {
    if (message.role !== "assistant") continue;
    for (const call of message.tool_calls ?? []) {
      if (call.function.name !== "take_action") continue;
      try {
        const args: unknown = JSON.parse(call.function.arguments);
        if (typeof args === "object" && args !== null && "action" in args && typeof args.action === "string") {
          actions.push(args.action);
        }
      } catch {
        // unparseable arguments never reached the environment
      }
    }
  }
  return actions;
}

/** Gets `object` into the hands: go to it, open its receptacle, take it. */
function fetch(engine: AlfEngine, object: string): string {
  const where = engine.location.get(object) as string;
  if (engine.at !== where) return `go to ${where}`;
  if (!engine.isAccessible(where)) return `open ${where}`;
  return `take ${object} from ${where}`;
}

/** Puts the held object into `receptacle`: go there, open it, put. */
function deliver(engine: AlfEngine, held: string, receptacle: string): string {
  if (engine.at !== receptacle) return `go to ${receptacle}`;
  if (!engine.isAccessible(receptacle)) return `open ${receptacle}`;
  return `put ${held} in/on ${receptacle}`;
}

/** The expert's next action in the engine's current state. */
export function expertAction(engine: AlfEngine): string {
  const { goal } = engine;
  const held = engine.holding;
  const isGoalObject = (o: string) => kindOf(o) === goal.object;

  if (held !== null && !isGoalObject(held)) {
    // Wrong object in hand (from an earlier policy): set it down where we stand.
    const here = engine.at as string;
    return engine.isAccessible(here) ? `put ${held} in/on ${here}` : `open ${here}`;
  }

  if (goal.type === "look_at_obj_in_light") {
    const lamp = goal.lamp as string;
    if (held === null)
      return fetch(
        engine,
        pickGoalObject(engine, () => true),
      );
    const stand = engine.location.get(lamp) as string;
    if (engine.at !== stand) return `go to ${stand}`;
    return `use ${lamp}`;
  }

  const destinations = engine.receptacles.filter((r) => kindOf(r) === goal.receptacle);
  // For two objects, aim at the destination that already holds the most finished ones.
  const finishedIn = (r: string) => engine.contents(r).filter((o) => isGoalObject(o) && engine.hasGoalState(o)).length;
  const target = [...destinations].sort((a, b) => finishedIn(b) - finishedIn(a))[0] as string;

  if (held === null) {
    return fetch(
      engine,
      pickGoalObject(engine, (o) => engine.location.get(o) !== target || !engine.hasGoalState(o)),
    );
  }
  const appliance = APPLIANCE[goal.type];
  if (appliance && !engine.hasGoalState(held)) {
    const station = engine.receptacles.find((r) => kindOf(r) === appliance.kind) as string;
    if (engine.at !== station) return `go to ${station}`;
    return `${appliance.verb} ${held} with ${station}`;
  }
  return deliver(engine, held, target);
}

/** The goal-kind object to fetch next: one in an open place first, then the first by name. */
function pickGoalObject(engine: AlfEngine, wanted: (object: string) => boolean): string {
  const candidates = [...engine.location.keys()]
    .filter((o) => kindOf(o) === engine.goal.object && engine.location.get(o) !== "agent" && wanted(o))
    .sort();
  const here = candidates.find((o) => engine.location.get(o) === engine.at);
  const visible = candidates.find((o) => engine.isAccessible(engine.location.get(o) as string));
  const choice = here ?? visible ?? candidates[0];
  if (choice === undefined) throw new Error(`no ${engine.goal.object} left to fetch`);
  return choice;
}

export const alfworldExpert: ScriptedAgent = {
  name: "alfworld-expert",
  act(messages, index) {
    const engine = new AlfEngine(generateAlfInstance(index));
    for (const action of actionsTaken(messages)) engine.step(action);
    return takeAction(turnsSoFar(messages), expertAction(engine));
  },
};

/** What the random agent has read so far. */
interface Belief {
  receptacles: string[];
  at: string | null;
  holding: string | null;
  /** Objects seen at the current location (from the last arrival/open observation). */
  here: string[];
  /** Whether the current location was reported closed. */
  closed: boolean;
}

/** "a apple 1, a bread 1, and a knife 1" -> names. */
function namesIn(text: string): string[] {
  return [...text.matchAll(/\ba ([a-z]+ \d+)/g)].map((m) => m[1] as string);
}

function readBelief(messages: readonly ChatMessage[]): Belief {
  const opening = messages.find((m) => m.role === "user")?.content ?? "";
  const seen = /you see (.*?)\.\n/.exec(opening);
  const belief: Belief = {
    receptacles: seen ? namesIn(seen[1] as string) : [],
    at: null,
    holding: null,
    here: [],
    closed: false,
  };
  for (const message of messages) {
    if (message.role !== "tool") continue;
    const text = message.content;
    const arrived = /^You arrive at ([a-z]+ \d+)\./.exec(text);
    if (arrived) {
      belief.at = arrived[1] as string;
      belief.here = namesIn(text.slice(arrived[0].length));
      belief.closed = text.endsWith("is closed.");
    }
    if (/^You open the /.test(text)) {
      belief.here = namesIn(text.replace(/^You open the [a-z]+ \d+\./, ""));
      belief.closed = false;
    }
    const picked = /^You pick up the ([a-z]+ \d+)/.exec(text);
    if (picked) {
      belief.holding = picked[1] as string;
      belief.here = belief.here.filter((o) => o !== belief.holding);
    }
    if (/^You put the /.test(text)) belief.holding = null;
  }
  return belief;
}

/** What a reader guesses each appliance is for. */
const TRANSFORM_AT: Readonly<Record<string, string>> = { sinkbasin: "clean", microwave: "heat", fridge: "cool" };

/**
 * Seeded random baseline: plausible actions built from what it has read, chosen at random (a
 * move 40% of the time, something done with what is here 55%, look/inventory 5%).
 */
export const alfworldRandom: ScriptedAgent = {
  name: "alfworld-random",
  act(messages, index) {
    const turn = turnsSoFar(messages);
    const rng = rngFor(ALFWORLD_TASK_NAME, index * 64 + turn, "random-agent");
    const belief = readBelief(messages);
    const moves = belief.receptacles.filter((r) => r !== belief.at).map((r) => `go to ${r}`);
    const doings: string[] = [];
    if (belief.at) {
      if (belief.closed) doings.push(`open ${belief.at}`);
      for (const lamp of belief.here.filter((o) => o.startsWith("desklamp"))) doings.push(`use ${lamp}`);
      if (belief.holding) {
        doings.push(`put ${belief.holding} in/on ${belief.at}`);
        const verb = TRANSFORM_AT[kindOf(belief.at)];
        if (verb) doings.push(`${verb} ${belief.holding} with ${belief.at}`);
      } else {
        for (const o of belief.here) if (!o.startsWith("desklamp")) doings.push(`take ${o} from ${belief.at}`);
      }
    }
    const roll = rng.next();
    const pool =
      roll < 0.05 || (moves.length === 0 && doings.length === 0)
        ? ["look", "inventory"]
        : roll < 0.45 || doings.length === 0
          ? moves
          : doings;
    return takeAction(turn, rng.pick(pool.length > 0 ? pool : ["look"]));
  },
};
