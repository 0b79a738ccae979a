import type { ChatCodec } from "../../shared/chat/index.ts";
import type { TrainerConfig } from "../../shared/config/trainer.ts";
import type { ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";
import { type Syllables, syllablesOf } from "../sft/answer-variants.ts";
import { firstQuestion, frameWordsOf, questionVariant, questionWordsInActions } from "../sft/question-variants.ts";
import type { PreparedBatch } from "./batch.ts";
import type { LossRow } from "./loss.ts";

/**
 * Question-renamed copies of a step's trajectories, trained with the trajectory's advantage
 * (`trainer.renamedVariants`). The reward of an episode that copied the question's word into its
 * action (a column, a file extension) pays for that word wherever the policy may spell it next, so
 * at small scale RL raises the word rather than the copying (docs/learning.md, "Kinds the base was
 * never shown"). A copy with the question's words renamed to fresh ones throughout (question,
 * actions, observations; `questionVariant`, as `agentrl sft --question-variants` makes for
 * imitation) carries the same advantage and pays only for copying.
 *
 * A copy was not sampled by the policy, so it has no behaviour log-probs; its tokens get the policy
 * gradient the PPO term gives at ratio 1 (one optimizer step per batch: −A·∇log π), as an
 * advantage-weighted log-likelihood. Copies join the step's token mean, so each copied token
 * weighs as much as a sampled one.
 */

/**
 * Distinct questions of a task before its copies start: with fewer, "in at least half of them"
 * takes an instance's words for the task's wording (of two questions, every word is in half).
 */
export const MIN_QUESTIONS = 8;

/** What renaming reads of a trajectory (an expert trace has it too). */
export interface RenamableEpisode {
  readonly task: string;
  readonly messages: readonly ChatMessage[];
}

/** What a copy is tokenized from. */
export interface CopyableEpisode extends RenamableEpisode {
  readonly tools: readonly ToolSpec[];
}

/** Distinct first questions per task, and the question words their actions copied: what renaming needs. */
export class QuestionRenamer {
  private readonly questions = new Map<string, Set<string>>();
  private readonly copied = new Map<string, Set<string>>();
  private readonly frames = new Map<string, Set<string>>();
  private readonly syllables = new Map<string, Syllables>();

  /** Adds a step's trajectories to what the frame words and fresh words' syllables are read from. */
  observe(trajectories: readonly RenamableEpisode[]): void {
    const tasks = new Set(trajectories.map((t) => t.task));
    for (const t of trajectories) {
      const question = firstQuestion(t.messages);
      if (question !== "") setOf(this.questions, t.task).add(question);
    }
    // the task's frame words: those in at least half of its distinct questions seen so far (the
    // task's wording, not the instance's, which renaming leaves alone)
    for (const task of tasks) this.frames.set(task, frameWordsOf([...(this.questions.get(task) ?? [])]));
    for (const t of trajectories)
      for (const word of questionWordsInActions(t.messages, this.frameOf(t.task))) setOf(this.copied, t.task).add(word);
    for (const task of tasks) this.syllables.set(task, syllablesOf([...(this.copied.get(task) ?? [])]));
  }

  /** The task's frame words as observed so far. */
  frameOf(task: string): ReadonlySet<string> {
    return this.frames.get(task) ?? new Set();
  }

  /**
   * A renamed copy of the trajectory's messages, or undefined when its actions copy no question
   * word, or while its task has had fewer than `MIN_QUESTIONS` distinct questions to tell its
   * frame words from.
   */
  variantOf(trajectory: RenamableEpisode, random: () => number): ChatMessage[] | undefined {
    if ((this.questions.get(trajectory.task)?.size ?? 0) < MIN_QUESTIONS) return undefined;
    const syllables = this.syllables.get(trajectory.task) ?? { syllables: [], codas: [] };
    return questionVariant(trajectory.messages, this.frameOf(trajectory.task), syllables, random);
  }
}

/** The renamed copies of a step, as loss rows appended after the batch's own. */
export interface RenamedRows {
  readonly sequences: Int32Array[];
  readonly rows: LossRow[];
  /** Trained tokens of the copies: added to the step's token-mean denominator. */
  readonly tokens: number;
  /** Batch rows that had a copy (a trajectory whose actions copy no question word has none). */
  readonly renamedTrajectories: number;
}

/**
 * `count` renamed copies of every batch row with a non-zero advantage (a zero one adds no gradient),
 * tokenized with the policy's codec; a copy longer than the context is left out. A copy's assistant
 * tokens carry its trajectory's advantage as the loss used it (after task normalization), times
 * `negativeAdvantageWeight` where negative.
 */
export function renamedRows(
  batch: PreparedBatch,
  trajectories: readonly CopyableEpisode[],
  renamer: QuestionRenamer,
  codec: ChatCodec,
  options: {
    readonly count: number;
    readonly contextLength: number;
    readonly random: () => number;
    readonly trainer: Pick<TrainerConfig, "negativeAdvantageWeight">;
  },
): RenamedRows {
  const sequences: Int32Array[] = [];
  const rows: LossRow[] = [];
  let tokens = 0;
  let renamedTrajectories = 0;
  for (const row of batch.rows) {
    const advantage = rowAdvantage(row);
    if (advantage === 0) continue;
    const trajectory = trajectories[row.trajectory] as (typeof trajectories)[number];
    let made = 0;
    for (let k = 0; k < options.count; k++) {
      const messages = renamer.variantOf(trajectory, options.random);
      if (!messages) break; // nothing to rename: no draw will find a word
      const encoded = codec.encodeConversation(messages, trajectory.tools);
      if (encoded.tokens.length > options.contextLength) continue;
      const weight = advantage < 0 ? advantage * options.trainer.negativeAdvantageWeight : advantage;
      // position 0 has no log-prob (nothing precedes it), as in the batch's rows
      const reinforce = Float32Array.from(encoded.lossMask, (m, t) => (m === 1 && t > 0 ? weight : 0));
      const trained = encoded.lossMask.reduce((s, m, t) => s + (m === 1 && t > 0 ? 1 : 0), 0);
      if (trained === 0) continue;
      const zeros = Array.from({ length: encoded.tokens.length }, () => 0);
      sequences.push(Int32Array.from(encoded.tokens));
      rows.push({ oldLogp: zeros, advantages: zeros, lossMask: zeros, fresh: zeros, fullLogp: zeros, reinforce });
      tokens += trained;
      made += 1;
    }
    if (made > 0) renamedTrajectories += 1;
  }
  return { sequences, rows, tokens, renamedTrajectories };
}

/** The advantage the loss gave a row's trained tokens (one per trajectory; 0 when it has none). */
function rowAdvantage(row: PreparedBatch["rows"][number]): number {
  const t = row.lossMask.indexOf(1);
  return t < 0 ? 0 : (row.advantages[t] as number);
}

function setOf(map: Map<string, Set<string>>, key: string): Set<string> {
  const found = map.get(key);
  if (found) return found;
  const set = new Set<string>();
  map.set(key, set);
  return set;
}
