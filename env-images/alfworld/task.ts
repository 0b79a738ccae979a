import { z } from "zod";
import type { Episode, StepResult, TaskDefinition } from "../../shared/env/task.ts";
import { AlfEngine, normalizeAction } from "./engine.ts";
import { ALFWORLD_SPLITS, ALFWORLD_TASK_NAME, generateAlfInstance } from "./world.ts";

/**
 * The alfworld task (AgentBench FC `alfworld`): one tool, `take_action(action)`, 20 turns.
 * Reaching the goal ends the episode with `completed` and reward 1; the same action three times
 * in a row ends it with `agent invalid action` (AgentBench's repetition rule, checked before the
 * goal, as there). Impossible actions answer "Nothing happens." and the episode goes on.
 */

export const TakeActionArgs = z.strictObject({
  action: z.string().min(1).max(200).describe("The action you would like to take"),
});

export const ALFWORLD_MAX_TURNS = 20;
/** Identical consecutive actions that end an episode. */
export const REPEAT_LIMIT = 3;

export const ALFWORLD_SYSTEM_PROMPT = [
  "You are in a household and must complete the task you are given. Each turn, call take_action with one action:",
  "go to X, open X, close X, take O from X, put O in/on X, clean O with X, heat O with X, cool O with X, use LAMP, examine X, look, inventory.",
  'You can carry one object at a time. If the answer is "Nothing happens.", the action was not possible.',
  `Repeating the same action ${REPEAT_LIMIT} times in a row ends the episode as a failure. You have at most ${ALFWORLD_MAX_TURNS} turns.`,
].join("\n");

class AlfEpisode implements Episode {
  readonly messages;
  private readonly engine: AlfEngine;
  private readonly recent: string[] = [];

  constructor(index: number) {
    this.engine = new AlfEngine(generateAlfInstance(index));
    this.messages = [
      { role: "system" as const, content: ALFWORLD_SYSTEM_PROMPT },
      { role: "user" as const, content: `Here is your task. ${this.engine.initialObservation()}` },
    ];
  }

  async call(tool: string, args: unknown): Promise<StepResult> {
    if (tool !== "take_action") throw new Error(`alfworld has no tool "${tool}"`);
    const { action } = TakeActionArgs.parse(args);
    const outcome = this.engine.step(action);
    this.recent.push(normalizeAction(action));
    if (this.recent.length > REPEAT_LIMIT) this.recent.shift();
    if (this.recent.length === REPEAT_LIMIT && this.recent.every((a) => a === this.recent[0])) {
      return {
        observation: `${outcome.observation}\nYou repeated the same action ${REPEAT_LIMIT} times in a row; the episode ends.`,
        reward: { reward: 0, score: 0, metrics: { won: 0, repeated: 1 } },
        finish: "agent invalid action",
      };
    }
    if (outcome.won) {
      return {
        observation: outcome.observation,
        reward: { reward: 1, score: 1, metrics: { won: 1 } },
        finish: "completed",
      };
    }
    return { observation: outcome.observation };
  }
}

export const alfworldTask: TaskDefinition = {
  name: ALFWORLD_TASK_NAME,
  tools: [{ name: "take_action", description: "Take an action.", parameters: TakeActionArgs }],
  maxTurns: ALFWORLD_MAX_TURNS,
  splits: ALFWORLD_SPLITS,
  async start(index: number): Promise<Episode> {
    return new AlfEpisode(index);
  },
};
