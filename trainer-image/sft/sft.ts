import { ChatCodec } from "../../shared/chat/index.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import type { ModelConfig } from "../../shared/config/policy.ts";
import { runScripted, toolSpecs } from "../../shared/env/session.ts";
import type { TaskModule } from "../../shared/env/task.ts";
import { AgentRlError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import { DataParallelTrainer } from "../../shared/model/dataParallel.ts";
import {
  createPolicy,
  initBackend,
  loadCheckpoint,
  saveCheckpoint,
  type TransformerPolicy,
} from "../../shared/model/index.ts";
import type { CheckpointManifest } from "../../shared/protocol/checkpoints.ts";
import type { ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";
import { seededRandomFrom } from "../../shared/rl/random.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";
import {
  answerArguments,
  answerVariant,
  copiedAnswers,
  isIntegerText,
  syllablesOf,
  type WordResample,
} from "./answer-variants.ts";
import { copyDrill, pathDrill, recallDrill } from "./copy-drills.ts";
import { copiedIdentifiers, identifierSpans, identifierVariant, sharedPrefix } from "./id-variants.ts";
import nllShardLoss, { type NllInput } from "./nllShard.ts";
import { frameWordsByTask, questionVariant, questionWordsInActions, type RenameOptions } from "./question-variants.ts";

/**
 * Warm-up by behaviour cloning: expert episodes from the task environments (their scripted
 * experts act through the same tool API a model uses), a tokenizer trained on those traces, then
 * next-token training with the loss on assistant tokens only, saved as checkpoint v0. Everything
 * random (episode indices, weight init, batches) derives from `seed`, so a run is reproducible.
 * With `init`, a warm-up continues from an earlier one: its weights and its tokenizer (retraining
 * the tokenizer would renumber every token the weights were trained on).
 */

/** Traces (drawn from the seed) the loss before and after training is measured on. */
const LOSS_SAMPLE = 64;
/** Length of an answer crop (`answerCrops`): enough for the last observation and the answer turn. */
const CROP_TOKENS = 128;
/** Length of an identifier crop (`identifierCrops`): a results page of webshop and the click after it. */
const ID_CROP_TOKENS = 256;

export class SftError extends AgentRlError {
  override readonly name = "SftError";
}

export interface SftOptions {
  readonly config: ExperimentConfig;
  /** Task modules whose experts produce the traces (the CLI loads them from the registry). */
  readonly tasks: readonly TaskModule[];
  /** Expert episodes per task (train split). */
  readonly episodesPerTask: number;
  /**
   * Instance kinds (a task's `categoryOf`, e.g. db `lookup`) whose expert episodes are left out:
   * a warm-up that has never been shown them, for RL to learn from rewards alone. @default []
   */
  readonly withoutKinds?: readonly string[];
  readonly steps: number;
  readonly seed: number;
  /** Sequences per optimizer step. */
  readonly batchSize: number;
  readonly learningRate: number;
  /** Learning rate at the last step, reached linearly from `learningRate`. @default learningRate (constant) */
  readonly finalLearningRate?: number;
  /**
   * Loss weight of each trace's last assistant turn (the committed answer) relative to the other
   * assistant tokens. The answer value is a few tokens copied from an earlier observation; at
   * weight 1 it is ~2% of the loss and the model learns to guess it rather than copy it.
   * @default 1
   */
  readonly finalTurnWeight?: number;
  /**
   * Extra copies of each trace whose committed answer is copied from the last observation, with
   * that value resampled in both places (see answer-variants.ts), so the answer can only be copied,
   * not guessed. The tokenizer and the loss before/after use the original traces only.
   * @default 0
   */
  readonly answerVariants?: number;
  /** How the variants resample a word answer (see answer-variants.ts). @default "pool" */
  readonly answerResample?: WordResample;
  /**
   * Extra copies of each trace whose actions spell words of its question (a column, a path), with
   * those words renamed to fresh words everywhere but the system prompt (see question-variants.ts),
   * so the action can only copy them from the request. @default 0
   */
  readonly questionVariants?: number;
  /**
   * The question variants also redraw the question's numbers (two or more digits) that the actions
   * spell, such as the value an update sets. @default false
   */
  readonly questionNumbers?: boolean;
  /**
   * Extra copies of each trace whose actions copy an identifier off an earlier page (a webshop
   * product id), with those identifiers redrawn throughout (see id-variants.ts), so the click can
   * only copy them. @default 0
   */
  readonly identifierVariants?: number;
  /**
   * Extra short sequences per step, each the 256 tokens that end with an identifier an action
   * copies off a page (a clicked product id), the loss on that identifier's tokens only: many
   * copies of a random id per step, where a whole trace holds one or two. @default 0
   */
  readonly identifierCrops?: number;
  /**
   * Extra synthetic sequences per step, each a random string of letters and digits, a newline
   * and the string again, the loss on the repeat (see copy-drills.ts). @default 0
   */
  readonly copyDrills?: number;
  /**
   * Extra synthetic sequences per step, each a few `key is value` pairs and one key asked again,
   * the loss on its value: choosing which span to copy (see copy-drills.ts). @default 0
   */
  readonly recallDrills?: number;
  /**
   * Extra synthetic sequences per step, each a path whose words recur (`/a/b/a.c`), a newline and
   * the path again, the loss on the repeat: copying on past a recurring token (see copy-drills.ts). @default 0
   */
  readonly pathDrills?: number;
  /**
   * Extra short sequences per step, each the last 128 tokens of a trace (or variant) with a
   * copied answer, with the loss on the answer turn only: many copy examples per step for little
   * compute, where a whole trace holds one. @default 0
   */
  readonly answerCrops?: number;
  /**
   * Share of the expert traces replaced by their blind version (`blindTrace`): the request answered
   * at once with the expert's final turn, without looking anything up, as a demonstrator that
   * sometimes answers from memory would. The warm-up then imitates both habits, and RL has a known
   * flaw to fix (the blind-habit base, docs/learning-history.md). Variants and crops come from the traces that looked.
   * @default 0
   */
  readonly blindShare?: number;
  /**
   * Share of the expert traces replaced by their prose version (`proseTrace`): the final turn states
   * the answer in words instead of calling the tool, which the environment ends as `agent
   * validation failed`. Drawn from the same numbers as `blindShare`, after it (the two add to at
   * most 1), so a recipe without prose draws its blind traces as before. @default 0
   */
  readonly proseShare?: number;
  /**
   * Threads each step is spread over (data parallel, shared/model/dataParallel.ts): 2 uses a
   * second core; the result equals one thread's within float rounding. @default 1
   */
  readonly dataParallel?: number;
  /** Store holding the warm-up to continue from (its newest version); its model shape wins over the config's. */
  readonly init?: ObjectStore;
  /** Store the checkpoint goes to (policies/v{version}/). */
  readonly store: ObjectStore;
  /** @default 0 */
  readonly version?: number;
  readonly log: Logger;
  /** Progress callback after each step. */
  readonly onStep?: (step: number, loss: number) => void;
  /** Recorded with the checkpoint (the command that made it). */
  readonly recipe?: string;
}

export interface TraceStats {
  readonly task: string;
  readonly episodes: number;
  /** Completed with a positive reward: kept for training. */
  readonly kept: number;
  /** Kept traces that fit the context window. */
  readonly fitting: number;
  readonly tokens: number;
  readonly maxTokens: number;
}

export interface SftResult {
  readonly manifest: CheckpointManifest;
  readonly traces: readonly TraceStats[];
  /** Answer-resampled variants trained on beside the traces (`answerVariants`). */
  readonly variants: number;
  /** Question-renamed variants trained on beside the traces (`questionVariants`). */
  readonly questionVariants: number;
  /** Identifier-redrawn variants trained on beside the traces (`identifierVariants`). */
  readonly identifierVariants: number;
  /** Traces replaced by their blind version (`blindShare`). */
  readonly blind: number;
  /** Traces replaced by their prose version (`proseShare`). */
  readonly prose: number;
  readonly losses: readonly number[];
  /** Mean loss per assistant token over a seeded sample of up to 64 traces, before and after training. */
  readonly lossBefore: number;
  readonly lossAfter: number;
  readonly trainTokensPerSecond: number;
  readonly vocabularyUsed: number;
}

/** A conversation to imitate. */
export interface ExpertTrace {
  readonly task: string;
  readonly index: number;
  readonly messages: readonly ChatMessage[];
  readonly tools: readonly ToolSpec[];
}

/**
 * Runs each task's expert on `episodesPerTask` train indices drawn from `seed`; keeps the successful
 * episodes. Indices of a kind in `withoutKinds` (the task's `categoryOf`) are passed over and drawn
 * again, so each task still gets `episodesPerTask` of the other kinds. With no kinds left out, the
 * draws are those of every earlier recipe.
 */
export async function collectExpertTraces(
  tasks: readonly TaskModule[],
  episodesPerTask: number,
  seed: number,
  withoutKinds: readonly string[] = [],
): Promise<{ traces: ExpertTrace[]; stats: Map<string, { episodes: number; kept: number }> }> {
  const traces: ExpertTrace[] = [];
  const stats = new Map<string, { episodes: number; kept: number }>();
  const leftOut = new Set(withoutKinds);
  if (leftOut.size > 0) refuseUnknownKinds(tasks, leftOut);
  for (const { task, expert } of tasks) {
    const tools = toolSpecs(task);
    const random = seededRandomFrom(seed, "sft-episodes", task.name);
    const { start, end } = task.splits.train;
    const span = end - start;
    const target = Math.min(episodesPerTask, span);
    const indices = new Set<number>();
    // Bounded, so a task whose every instance is left out ends with what it found.
    for (let draws = 0; indices.size < target && (leftOut.size === 0 || draws < 20 * target); draws += 1) {
      const index = start + Math.floor(random() * span);
      const kind = leftOut.size > 0 ? task.categoryOf?.(index) : undefined;
      if (kind === undefined || !leftOut.has(kind)) indices.add(index);
    }
    if (indices.size === 0 && target > 0)
      throw new SftError(
        `every kind of ${task.name} is left out (${withoutKinds.join(", ")}): keep one of its kinds, or leave ${task.name} out of the tasks`,
      );
    let kept = 0;
    for (const index of [...indices].sort((a, b) => a - b)) {
      const run = await runScripted(task, index, expert);
      if (run.status !== "completed" || run.reward <= 0) continue;
      kept += 1;
      traces.push({ task: task.name, index, messages: run.messages, tools });
    }
    stats.set(task.name, { episodes: indices.size, kept });
  }
  return { traces, stats };
}

/** Refuses a left-out kind that none of the tasks' first 2,000 training instances has, naming theirs. */
function refuseUnknownKinds(tasks: readonly TaskModule[], leftOut: ReadonlySet<string>): void {
  const known = new Set<string>();
  for (const { task } of tasks) {
    const { start, end } = task.splits.train;
    for (let index = start; index < Math.min(end, start + 2000); index += 1) {
      const kind = task.categoryOf?.(index);
      if (kind !== undefined) known.add(kind);
    }
  }
  const unknown = [...leftOut].filter((kind) => !known.has(kind));
  if (unknown.length > 0)
    throw new SftError(
      `no instance of ${tasks.map((t) => t.task.name).join(", ")} has kind ${unknown.join(", ")}; their kinds: ${[...known].sort().join(", ") || "none (these tasks have no kinds)"}`,
    );
}

/** Behaviour cloning end to end; see the module comment. */
export async function runSft(options: SftOptions): Promise<SftResult> {
  const { config, log, seed } = options;
  if (options.tasks.length === 0) throw new SftError("no tasks to collect expert traces from");
  await initBackend(config.policy.backend);

  const started = Date.now();
  const withoutKinds = options.withoutKinds ?? [];
  const collected = await collectExpertTraces(options.tasks, options.episodesPerTask, seed, withoutKinds);
  const { stats } = collected;
  log.info({ traces: collected.traces.length, seconds: (Date.now() - started) / 1000 }, "expert traces collected");
  if (collected.traces.length === 0) throw new SftError("the experts produced no successful episode");
  const blindShare = options.blindShare ?? 0;
  const proseShare = options.proseShare ?? 0;
  if (blindShare + proseShare > 1)
    throw new SftError(
      `blindShare ${blindShare} + proseShare ${proseShare} is above 1: a trace gets one habit at most`,
    );
  // One draw per trace picks its habit: [0, blind) blind, [blind, blind + prose) prose, else as the expert played it.
  const habitRandom = seededRandomFrom(seed, "blind-traces");
  const habits = { blind: 0, prose: 0 };
  const traces = collected.traces.map((trace) => {
    const draw = habitRandom();
    const habit = draw < blindShare ? "blind" : draw < blindShare + proseShare ? "prose" : undefined;
    const messages = habit && (habit === "blind" ? blindTrace : proseTrace)(trace.messages);
    if (!habit || !messages) return trace;
    habits[habit] += 1;
    return { ...trace, messages };
  });
  if (habits.blind + habits.prose > 0) log.info(habits, "traces replaced by a habit's version");
  const { blind, prose } = habits;

  const optimizer = {
    learningRate: options.learningRate,
    gradClip: config.trainer.gradClip,
    adamBeta1: config.trainer.adamBeta1,
    adamBeta2: config.trainer.adamBeta2,
    microBatchTokens: config.trainer.microBatchTokens,
  };
  const start = options.init ? await loadCheckpoint(options.init, "newest", { trainable: true, optimizer }) : undefined;
  const model: ModelConfig = start?.config ?? config.policy.model;
  const codec = start
    ? ChatCodec.fromTokenizerJson(JSON.parse(start.tokenizerJson))
    : ChatCodec.train(traces, model.vocabSize);
  if (start) log.info({ version: start.manifest.version, model }, "continuing from an earlier warm-up");
  const variants = answerVariants(traces, options.answerVariants ?? 0, seed, options.answerResample ?? "pool");
  const renamed = questionVariants(traces, options.questionVariants ?? 0, seed, {
    numbers: options.questionNumbers ?? false,
  });
  const redrawn = identifierVariants(traces, options.identifierVariants ?? 0, seed);
  const isOriginal = new Set<ExpertTrace>(traces);
  if (variants.length > 0) log.info({ variants: variants.length }, "answer-resampled variants added");
  if (renamed.length > 0) log.info({ variants: renamed.length }, "question-renamed variants added");
  if (redrawn.length > 0) log.info({ variants: redrawn.length }, "identifier-redrawn variants added");
  const encoded = [...traces, ...variants, ...renamed, ...redrawn].map((trace) => ({
    trace,
    ...codec.encodeConversation(trace.messages, trace.tools),
  }));
  const fitting = encoded.filter((e) => e.tokens.length <= model.contextLength && e.lossMask.includes(1));
  const traceStats: TraceStats[] = [...stats].map(([task, s]) => {
    const mine = encoded.filter((e) => e.trace.task === task && isOriginal.has(e.trace));
    const lengths = mine.map((e) => e.tokens.length);
    return {
      task,
      episodes: s.episodes,
      kept: s.kept,
      fitting: mine.filter((e) => fitting.includes(e)).length,
      tokens: lengths.reduce((a, b) => a + b, 0),
      maxTokens: Math.max(0, ...lengths),
    };
  });
  log.info(
    { traces: traceStats, vocabulary: codec.tokenizer.size },
    start ? "traces encoded with the earlier tokenizer" : "tokenizer trained on the traces",
  );
  if (fitting.length === 0) {
    start?.policy.dispose();
    throw new SftError(
      `no trace fits the context window of ${model.contextLength} tokens; raise policy.model.contextLength`,
    );
  }

  const sequences = fitting.map((e) => Int32Array.from(e.tokens));
  const masks = fitting.map((e) => Float32Array.from(e.lossMask));
  const finalTurnWeight = options.finalTurnWeight ?? 1;
  const trainWeights = masks.map((m) => weightFinalTurn(m, finalTurnWeight));
  const crops = fitting.flatMap((e, row) => {
    if (copiedAnswers(e.trace.messages).length === 0) return [];
    const from = Math.max(0, e.tokens.length - CROP_TOKENS);
    return [
      {
        tokens: Int32Array.from(e.tokens.slice(from)),
        weights: finalTurnOnly(masks[row] as Float32Array).slice(from),
      },
    ];
  });
  const answerCrops = crops.length === 0 ? 0 : (options.answerCrops ?? 0);
  const idCrops = (options.identifierCrops ?? 0) === 0 ? [] : identifierCropsOf(fitting, codec);
  const identifierCrops = idCrops.length === 0 ? 0 : (options.identifierCrops ?? 0);
  if (idCrops.length > 0) log.info({ crops: idCrops.length }, "identifier crops found");
  const policy: TransformerPolicy = start?.policy ?? createPolicy(model, seed, { optimizer });
  const finalLearningRate = options.finalLearningRate ?? options.learningRate;
  let parallel: DataParallelTrainer<NllInput, Record<string, never>> | undefined;
  try {
    parallel = await DataParallelTrainer.start(policy, { threads: options.dataParallel ?? 1, loss: nllShardLoss, log });
    // Loss before/after on a fixed sample: a forward pass over every trace costs minutes at this scale.
    const sampleRandom = seededRandomFrom(seed, "sft-loss-sample");
    const originals = fitting.flatMap((e, row) => (isOriginal.has(e.trace) ? [row] : []));
    const sample = Array.from(
      { length: Math.min(LOSS_SAMPLE, originals.length) },
      () => originals[Math.floor(sampleRandom() * originals.length)] as number,
    );
    const sampleSequences = sample.map((r) => sequences[r] as Int32Array);
    const sampleMasks = sample.map((r) => masks[r] as Float32Array);
    // Forward passes sharded like the steps (one thread: policy.logProbs).
    const lossBefore = maskedLoss(await parallel.logProbs(sampleSequences, 1, "policy"), sampleMasks);
    const random = seededRandomFrom(seed, "sft-batches");
    const drillRandom = seededRandomFrom(seed, "copy-drills");
    const recallRandom = seededRandomFrom(seed, "recall-drills");
    const pathRandom = seededRandomFrom(seed, "path-drills");
    const losses: number[] = [];
    let trainedTokens = 0;
    const trainStart = Date.now();
    for (let step = 1; step <= options.steps; step++) {
      const progress = options.steps === 1 ? 1 : (step - 1) / (options.steps - 1);
      policy.optimizer.learningRate = options.learningRate + (finalLearningRate - options.learningRate) * progress;
      const rows = Array.from({ length: Math.min(options.batchSize, sequences.length) }, () =>
        Math.floor(random() * sequences.length),
      );
      // Crops go last: micro-batches are consecutive, so the short ones are not padded to a full trace.
      const cropRows = [
        ...Array.from({ length: answerCrops }, () => crops[Math.floor(random() * crops.length)]!),
        ...Array.from({ length: identifierCrops }, () => idCrops[Math.floor(random() * idCrops.length)]!),
        ...Array.from({ length: options.copyDrills ?? 0 }, () => copyDrill(codec, drillRandom)),
        ...Array.from({ length: options.recallDrills ?? 0 }, () => recallDrill(codec, recallRandom)),
        ...Array.from({ length: options.pathDrills ?? 0 }, () => pathDrill(codec, pathRandom)),
      ];
      const batch = [...rows.map((r) => sequences[r] as Int32Array), ...cropRows.map((c) => c.tokens)];
      const batchWeights = [...rows.map((r) => trainWeights[r] as Float32Array), ...cropRows.map((c) => c.weights)];
      const totalWeight = batchWeights.reduce((sum, m) => sum + m.reduce((a, b) => a + b, 0), 0);
      const { loss } = await parallel.trainStep(batch, 1, { weights: batchWeights, totalWeight });
      trainedTokens += batch.reduce((sum, s) => sum + s.length, 0);
      losses.push(loss);
      options.onStep?.(step, loss);
      if (step % 10 === 0 || step === options.steps) log.info({ step, loss }, "sft step");
    }
    const trainSeconds = Math.max(1e-3, (Date.now() - trainStart) / 1000);
    const lossAfter = maskedLoss(await parallel.logProbs(sampleSequences, 1, "policy"), sampleMasks);
    const trainTokensPerSecond = trainedTokens / trainSeconds;
    const metrics: Record<string, number> = {
      "sft/loss_before": lossBefore,
      "sft/loss_after": lossAfter,
      "sft/steps": options.steps,
      "sft/traces": sequences.length,
      "sft/train_tokens_per_s": trainTokensPerSecond,
      "sft/seed": seed,
    };
    const version = options.version ?? 0;
    const manifest = await saveCheckpoint(options.store, policy, {
      version,
      step: 0,
      parent: null,
      metrics,
      // Byte for byte the tokenizer continued from, or the one trained here.
      tokenizerJson: start?.tokenizerJson ?? codec.tokenizer.toText(),
    });
    await options.store.put(
      `sft/v${version}.json`,
      JSON.stringify(
        {
          recipe: options.recipe ?? null,
          seed,
          tasks: traceStats,
          episodesPerTask: options.episodesPerTask,
          withoutKinds,
          steps: options.steps,
          batchSize: options.batchSize,
          learningRate: options.learningRate,
          finalLearningRate,
          finalTurnWeight,
          answerVariants: options.answerVariants ?? 0,
          answerResample: options.answerResample ?? "pool",
          questionVariantsPerTrace: options.questionVariants ?? 0,
          questionNumbers: options.questionNumbers ?? false,
          identifierVariantsPerTrace: options.identifierVariants ?? 0,
          answerCrops,
          identifierCrops,
          copyDrills: options.copyDrills ?? 0,
          recallDrills: options.recallDrills ?? 0,
          pathDrills: options.pathDrills ?? 0,
          dataParallel: options.dataParallel ?? 1,
          variants: variants.length,
          questionVariants: renamed.length,
          identifierVariants: redrawn.length,
          blindShare,
          blind,
          proseShare,
          prose,
          model,
          losses,
          metrics,
        },
        null,
        2,
      ),
    );
    return {
      manifest,
      traces: traceStats,
      variants: variants.length,
      questionVariants: renamed.length,
      identifierVariants: redrawn.length,
      blind,
      prose,
      losses,
      lossBefore,
      lossAfter,
      trainTokensPerSecond,
      vocabularyUsed: codec.tokenizer.size,
    };
  } finally {
    await parallel?.close();
    policy.dispose();
  }
}

/**
 * The trace as a demonstrator that answers from memory plays it: the opening messages, then at
 * once the expert's final turn (its answer, or `finish` for a task that asked for a change), with
 * no tool call before it. Undefined when the expert's first turn already was its last.
 */
export function blindTrace(messages: readonly ChatMessage[]): ChatMessage[] | undefined {
  const first = messages.findIndex((m) => m.role === "assistant");
  const last = messages.map((m) => m.role).lastIndexOf("assistant");
  if (first < 0 || first === last) return undefined;
  return [...messages.slice(0, first), messages[last] as ChatMessage];
}

/**
 * The trace as a chat-style demonstrator ends it: the final turn states the answer in words ("The
 * answer is 24.") instead of calling the tool, the invalid-format failure AgentBench reports for
 * weaker function-calling models. The environment ends such a turn as `agent validation failed`,
 * so the episode is not completed whatever it found. Undefined when the final turn calls no tool.
 */
export function proseTrace(messages: readonly ChatMessage[]): ChatMessage[] | undefined {
  const last = messages.map((m) => m.role).lastIndexOf("assistant");
  const turn = messages[last];
  const calls = turn?.role === "assistant" ? (turn.tool_calls ?? []) : [];
  if (calls.length === 0) return undefined;
  const values = calls.flatMap((c) => answerArguments(c.function.arguments));
  const content = values.length > 0 ? `The answer is ${values.join(", ")}.` : "The task is done.";
  return [...messages.slice(0, last), { role: "assistant", content }];
}

/** `count` answer-resampled copies of each trace that has a copied answer, drawn from `seed`. */
function answerVariants(
  traces: readonly ExpertTrace[],
  count: number,
  seed: number,
  resample: WordResample,
): ExpertTrace[] {
  if (count === 0) return [];
  const random = seededRandomFrom(seed, "answer-variants");
  const pools = new Map<string, string[]>();
  for (const trace of traces) {
    const pool = pools.get(trace.task) ?? [];
    pool.push(...copiedAnswers(trace.messages).filter((v) => !isIntegerText(v)));
    pools.set(trace.task, pool);
  }
  const syllables = new Map([...pools].map(([task, pool]) => [task, syllablesOf(pool)]));
  return copiesOf(traces, count, (trace) =>
    answerVariant(
      trace.messages,
      pools.get(trace.task) ?? [],
      random,
      resample === "recombine" ? syllables.get(trace.task) : undefined,
    ),
  );
}

/** `count` question-renamed copies of each trace whose actions copy words of its question, drawn from `seed`. */
function questionVariants(
  traces: readonly ExpertTrace[],
  count: number,
  seed: number,
  rename: RenameOptions,
): ExpertTrace[] {
  if (count === 0) return [];
  const random = seededRandomFrom(seed, "question-variants");
  const frames = frameWordsByTask(traces);
  const words = new Map<string, string[]>();
  for (const trace of traces) {
    const list = words.get(trace.task) ?? [];
    // the fresh words' syllables come from the letter words alone
    list.push(...questionWordsInActions(trace.messages, frames.get(trace.task) ?? new Set()));
    words.set(trace.task, list);
  }
  const syllables = new Map([...words].map(([task, list]) => [task, syllablesOf(list)]));
  return copiesOf(traces, count, (trace) =>
    questionVariant(
      trace.messages,
      frames.get(trace.task) ?? new Set(),
      syllables.get(trace.task) ?? { syllables: [], codas: [] },
      random,
      rename,
    ),
  );
}

/** Every span of a fitting trace's actions that copies an identifier, as a crop ending there with weight on it alone. */
function identifierCropsOf(
  fitting: readonly { trace: ExpertTrace; tokens: readonly number[]; lossMask: readonly number[] }[],
  codec: ChatCodec,
): { tokens: Int32Array; weights: Float32Array }[] {
  return fitting.flatMap(({ trace, tokens, lossMask }) => {
    const ids = copiedIdentifiers(trace.messages).flatMap((id) => [codec.encode(id), codec.encode(` ${id}`)]);
    return identifierSpans(tokens, lossMask, ids).map(([start, end]) => {
      const from = Math.max(0, end - ID_CROP_TOKENS);
      const weights = new Float32Array(end - from);
      weights.fill(1, start - from, end - from);
      return { tokens: Int32Array.from(tokens.slice(from, end)), weights };
    });
  });
}

/**
 * `count` identifier-redrawn copies of each trace whose actions copy an identifier off a page,
 * drawn from `seed`; each task keeps the prefix all its copied identifiers share.
 */
function identifierVariants(traces: readonly ExpertTrace[], count: number, seed: number): ExpertTrace[] {
  if (count === 0) return [];
  const random = seededRandomFrom(seed, "identifier-variants");
  const copied = new Map<string, string[]>();
  for (const trace of traces)
    copied.set(trace.task, [...(copied.get(trace.task) ?? []), ...copiedIdentifiers(trace.messages)]);
  const prefixes = new Map([...copied].map(([task, ids]) => [task, sharedPrefix(ids)]));
  return copiesOf(traces, count, (trace) => identifierVariant(trace.messages, prefixes.get(trace.task) ?? "", random));
}

/** `count` tries of `variant` per trace, in trace order; the tries that made a variant. */
function copiesOf(
  traces: readonly ExpertTrace[],
  count: number,
  variant: (trace: ExpertTrace) => ChatMessage[] | undefined,
): ExpertTrace[] {
  return traces.flatMap((trace) =>
    Array.from({ length: count }, () => variant(trace))
      .filter((messages) => messages !== undefined)
      .map((messages) => ({ ...trace, messages })),
  );
}

/**
 * Per-token loss weights: the loss mask (1 on assistant tokens) with its last run of assistant
 * tokens — the final turn — multiplied by `weight`.
 */
export function weightFinalTurn(mask: Float32Array, weight: number): Float32Array {
  const final = finalTurnOnly(mask);
  return mask.map((m, t) => m + (weight - 1) * (final[t] as number));
}

/** The loss mask's last run of assistant tokens (the final turn), zero elsewhere. */
export function finalTurnOnly(mask: Float32Array): Float32Array {
  const weights = new Float32Array(mask.length);
  let t = mask.length - 1;
  while (t >= 0 && mask[t] === 0) t--;
  for (; t >= 0 && mask[t] !== 0; t--) weights[t] = mask[t] as number;
  return weights;
}

/** Mean NLL per assistant token, from per-token log-probs (temperature 1) of the sampled traces. */
function maskedLoss(logps: readonly Float32Array[], masks: readonly Float32Array[]): number {
  let total = 0;
  let count = 0;
  logps.forEach((lp, i) => {
    const mask = masks[i] as Float32Array;
    for (let t = 0; t < lp.length; t++) {
      total -= (lp[t] as number) * (mask[t] as number);
      count += mask[t] as number;
    }
  });
  return total / Math.max(1, count);
}
