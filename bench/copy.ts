/**
 * The copy probe: does a warm-up copy the value an observation printed into its answer, or guess
 * one? For each checkpoint folder (a store folder with policies/vN/, as `agentrl sft --out`
 * writes), side by side: the model's shape and size, its recipe (sft/vN.json), and per task the
 * mean loss per token on the committed answer value against every other assistant token (fresh,
 * seeded train-split expert episodes, not the ones it was trained on), the share of answer-value
 * tokens it predicts with p > 0.5, and greedy success on the first N test instances (the
 * evaluator's own code, against an in-process controller, env workers and pinned policy server).
 * "copies" when on every task the answer value costs at most 2x the other tokens and at most ln 2
 * nats per token (better than even odds on average: a model that learned nothing pays ln V on
 * every token and so passes the ratio alone). Besides, the loss on assistant tokens that spell a
 * word of the task's question (a column or table name in a query, a path in a command: copying
 * from the question rather than from an observation), a subset of the other tokens, and the same on
 * question-renamed copies of the episodes (`agentrl sft --question-variants`: those words renamed
 * to fresh ones throughout, so only copying predicts them, where the first measure also rewards
 * knowing the tasks' few column names); neither enters the verdict.
 *
 *   npm run bench:copy -- <checkpoint folder> [<folder> ...] [--n N] [--episodes E] [--json]
 *
 * `--n 0` skips the evaluation (`npm run bench:answer-loss` is that, the losses alone). `--ids`
 * adds a second table: webshop's clicked product ids (identifiers an action copies off the page
 * before it, id-variants.ts), their loss per token and by position within the id, where a model
 * that guesses pays the log of the id alphabet (34 characters: ln 34 = 3.53 nats) on every
 * character after the shared `B0` and one that copies pays little after the first; beside it, the
 * loss on copy drills (copy-drills.ts) after each repeat's first token, the same lookup without
 * the task around it.
 *
 *   npm run bench:copy -- <checkpoint folder> [...] --n 0 --ids
 *
 * `--drills` adds the loss on seeded synthetic drills (copy-drills.ts), each scored span's first
 * token apart from the tokens after it: copy drills (going on copying), recall drills (choosing
 * which span to copy: a question's number or word), path drills (copying past a recurring token).
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { z } from "zod";
import { evalTasks } from "../cli/launch/eval.ts";
import { loadTaskModule } from "../env-images/registry.ts";
import { startController } from "../functions/controller/controller.ts";
import { evaluate } from "../functions/evaluator/evaluate.ts";
import { ChatCodec } from "../shared/chat/index.ts";
import { parseConfig } from "../shared/config/index.ts";
import type { TaskModule } from "../shared/env/task.ts";
import { serveTask } from "../shared/env/worker.ts";
import { createLogger } from "../shared/log.ts";
import { loadCheckpoint } from "../shared/model/checkpoint.ts";
import { initBackend, type TransformerPolicy } from "../shared/model/index.ts";
import { parameterCount } from "../shared/model/memory.ts";
import { newestVersion } from "../shared/protocol/checkpoints.ts";
import type { ChatMessage } from "../shared/protocol/openai.ts";
import { seededRandomFrom } from "../shared/rl/random.ts";
import { LocalObjectStore } from "../shared/transport/local.ts";
import { servePolicy } from "../trainer-image/policy-server/serve.ts";
import { type Syllables, syllablesOf } from "../trainer-image/sft/answer-variants.ts";
import { copyDrill, pathDrill, recallDrill } from "../trainer-image/sft/copy-drills.ts";
import { copiedIdentifiers, identifierSpans } from "../trainer-image/sft/id-variants.ts";
import { frameWordsByTask, questionVariant, questionWordsInActions } from "../trainer-image/sft/question-variants.ts";
import { collectExpertTraces, type ExpertTrace } from "../trainer-image/sft/sft.ts";

/** The tasks whose answers copy an observed value (a query's result, a command's output). */
export const TASKS = ["db", "os"] as const;
/** Seed of the expert episodes: the same traces for every checkpoint, and for every run. */
const SEED = 99;
/** Expert episodes per task the renamed copies' frame words and syllables come from (a few ms each). */
const RENAME_SAMPLE = 200;
/** "copies" when the answer value costs at most this many times the other assistant tokens… */
export const COPY_RATIO = 2;
/** …and at most this many nats per token (the value token better than even odds, on average). */
export const COPY_MAX_LOSS = Math.LN2;

export const CopyArgs = z.object({
  folders: z.array(z.string().min(1)).min(1, "give at least one checkpoint folder"),
  n: z.number().int().min(0).max(10_000, "must be at most 10000 (the first N test instances per task)"),
  episodes: z.number().int().min(1, "must be at least 1").max(10_000, "must be at most 10000"),
  json: z.boolean(),
  ids: z.boolean(),
  drills: z.boolean(),
});
export type CopyArgs = z.infer<typeof CopyArgs>;

const USAGE =
  "usage: npm run bench:copy -- <checkpoint folder> [<folder> ...] [--n N (test instances per task, 0 skips the evaluation; default 100)] [--episodes E (expert episodes per task; default 40)] [--ids (webshop's clicked ids too)] [--drills (loss on seeded copy, recall and path drills)] [--json]";

/** A command line the probe cannot run, with what was wrong and what is allowed. */
export class CopyArgsError extends Error {
  override readonly name = "CopyArgsError";
}

function integer(flag: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value.trim())) throw new CopyArgsError(`${flag} must be a whole number, got "${value}"\n${USAGE}`);
  return Number(value);
}

/** Parses and validates the command line; every folder must hold a checkpoint (policies/vN/). */
export async function parseCopyArgs(argv: readonly string[]): Promise<CopyArgs> {
  let parsed: ReturnType<typeof parseRaw>;
  try {
    parsed = parseRaw(argv);
  } catch (error) {
    throw new CopyArgsError(`${(error as Error).message}\n${USAGE}`);
  }
  const result = CopyArgs.safeParse({
    folders: parsed.positionals,
    n: integer("--n", parsed.values.n, 100),
    episodes: integer("--episodes", parsed.values.episodes, 40),
    json: parsed.values.json ?? false,
    ids: parsed.values.ids ?? false,
    drills: parsed.values.drills ?? false,
  });
  if (!result.success) {
    const issue = result.error.issues[0];
    const path = issue?.path[0] === "folders" ? "<checkpoint folder>" : `--${String(issue?.path[0])}`;
    throw new CopyArgsError(`${path}: ${issue?.message}\n${USAGE}`);
  }
  for (const folder of result.data.folders) {
    const version = existsSync(folder) ? await newestVersion(new LocalObjectStore(folder)) : undefined;
    if (version === undefined)
      throw new CopyArgsError(
        `${folder} holds no checkpoint: a checkpoint folder has policies/vN/ (what \`agentrl sft --out\` writes)\n${USAGE}`,
      );
  }
  return result.data;
}

function parseRaw(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    allowPositionals: true,
    strict: true,
    options: {
      n: { type: "string" },
      episodes: { type: "string" },
      json: { type: "boolean" },
      ids: { type: "boolean" },
      drills: { type: "boolean" },
    },
  });
}

/** Loss per assistant token (nats) on the committed answer value and on everything else, for one task. */
export interface TaskProbe {
  readonly task: string;
  readonly valueTokens: number;
  readonly valueLoss: number;
  /** Share of answer-value tokens the model gives p > 0.5. */
  readonly confidentShare: number;
  readonly otherTokens: number;
  readonly otherLoss: number;
  /** valueLoss / otherLoss. */
  readonly ratio: number;
  /** Assistant tokens (outside the answer value) spelling a word of the question, and their loss: a subset of the other tokens. */
  readonly questionWordTokens: number;
  readonly questionWordLoss: number;
  /** Share of those tokens the model gives p > 0.5. */
  readonly questionWordConfidentShare: number;
  /** The same on question-renamed copies of the episodes: the fresh words' tokens in the actions. */
  readonly renamedWordTokens: number;
  readonly renamedWordLoss: number;
  readonly renamedWordConfidentShare: number;
  /** The renamed words' first token (choosing the word) and the tokens after it (copying it on). */
  readonly renamedFirstLoss: number;
  readonly renamedRestLoss: number;
  /** Share of the renamed words spelt in an action with the same tokens as in the prompt (a lookup can copy those). */
  readonly renamedSpeltAsAsked: number;
  /**
   * The question's numbers an action spells (a threshold, a value to set or insert: drawn per
   * instance, so only copying predicts them), their first token (which number, and its first
   * digit) and the tokens after it; null where no action spelt one.
   */
  readonly questionNumberTokens: number;
  readonly questionNumberFirstLoss: number | null;
  readonly questionNumberRestLoss: number | null;
  readonly verdict: "copies" | "guesses";
  /** Greedy success on the first `n` test instances; null with --n 0. */
  readonly greedySuccess: number | null;
  readonly testInstances: number;
}

export interface CheckpointProbe {
  readonly folder: string;
  readonly version: number;
  readonly model: {
    readonly dModel: number;
    readonly layers: number;
    readonly heads: number;
    readonly kvHeads: number;
    readonly ffnHidden: number;
    readonly vocabSize: number;
    readonly parameters: number;
  };
  /** The `agentrl sft` command that made the version (sft/vN.json), when recorded. */
  readonly recipe: string | null;
  readonly tasks: readonly TaskProbe[];
  readonly greedyAverage: number | null;
  /** "copies" when every task copies. */
  readonly verdict: "copies" | "guesses";
}

/** The string value of the last assistant turn's tool-call argument (the committed answer). */
export function committedValue(messages: readonly ChatMessage[]): string | undefined {
  const last = messages.filter((m) => m.role === "assistant").at(-1);
  const call = last && "tool_calls" in last ? last.tool_calls?.[0] : undefined;
  if (!call) return undefined;
  const value = Object.values(JSON.parse(call.function.arguments) as Record<string, unknown>)[0];
  return Array.isArray(value) ? String(value[0]) : String(value);
}

/**
 * Where the answer value's tokens sit: its last occurrence among the loss-masked (assistant)
 * tokens, which is the committed answer. -1 when it does not occur.
 */
export function answerStart(
  tokens: readonly number[],
  lossMask: ArrayLike<number>,
  valueIds: readonly number[],
): number {
  if (valueIds.length === 0) return -1;
  for (let i = tokens.length - valueIds.length; i >= 0; i--)
    if (lossMask[i] === 1 && matchesAt(tokens, i, valueIds)) return i;
  return -1;
}

/** Whether `part` sits in `tokens` at `at`, every position of it passing `keep`. */
function matchesAt(
  tokens: readonly number[],
  at: number,
  part: readonly number[],
  keep: (position: number) => boolean = () => true,
): boolean {
  return at + part.length <= tokens.length && part.every((id, k) => tokens[at + k] === id && keep(at + k));
}

/** The words of a task's question (its first user message): runs of letters, digits and `_`, 3 characters or more. */
export function questionWords(messages: readonly ChatMessage[]): string[] {
  const first = messages.find((m) => m.role === "user");
  const text = first && typeof first.content === "string" ? first.content : "";
  return [...new Set(text.match(/[A-Za-z0-9_]{3,}/g) ?? [])];
}

/** The numbers of two digits or more in a task's question (its first user message), as written. */
export function questionNumbers(messages: readonly ChatMessage[]): string[] {
  const first = messages.find((m) => m.role === "user");
  const text = first && typeof first.content === "string" ? first.content : "";
  return [...new Set(text.match(/(?<![A-Za-z0-9_])[1-9][0-9]+(?![A-Za-z0-9_])/g) ?? [])];
}

/**
 * Token spans [start, end) of loss-masked (assistant) tokens that spell one of `words` (each given
 * as its token ids with and without a leading space: a word inside `SUM(stock)` is not tokenized
 * as ` stock`), outside `excluded` (the answer value's positions). A span inside a longer one (the
 * unspaced form within a spaced form that ends alike) is left out, so each spelt word is one span.
 */
export function questionWordSpans(
  tokens: readonly number[],
  lossMask: ArrayLike<number>,
  words: readonly (readonly number[])[],
  excluded: (position: number) => boolean,
): Array<readonly [number, number]> {
  const spans: Array<readonly [number, number]> = [];
  for (const ids of words) {
    if (ids.length === 0) continue;
    for (let i = 0; i + ids.length <= tokens.length; i++)
      if (matchesAt(tokens, i, ids, (at) => lossMask[at] === 1 && !excluded(at))) spans.push([i, i + ids.length]);
  }
  const inside = (a: readonly [number, number], b: readonly [number, number]) =>
    a !== b && b[0] <= a[0] && a[1] <= b[1] && b[1] - b[0] > a[1] - a[0];
  return spans.filter((span) => !spans.some((other) => inside(span, other))).sort((a, b) => a[0] - b[0]);
}

/** The positions of `questionWordSpans`' tokens. */
export function questionWordPositions(
  tokens: readonly number[],
  lossMask: ArrayLike<number>,
  words: readonly (readonly number[])[],
  excluded: (position: number) => boolean,
): Set<number> {
  const found = new Set<number>();
  for (const [start, end] of questionWordSpans(tokens, lossMask, words, excluded))
    for (let i = start; i < end; i++) found.add(i);
  return found;
}

/** Loss on copied-identifier tokens: in all, the share with p > 0.5, and by position within the identifier. */
export interface IdentifierLoss {
  readonly tokens: number;
  readonly loss: number;
  readonly confidentShare: number;
  /** Mean loss of the identifiers' k-th token (k = 0, 1, …), with how many identifiers had one. */
  readonly byPosition: ReadonlyArray<{ readonly tokens: number; readonly loss: number }>;
}

/** Sums the per-token losses (`-logp`) over the identifier spans ([start, end) token ranges). */
export function identifierLoss(
  logps: ReadonlyArray<ArrayLike<number>>,
  spans: ReadonlyArray<ReadonlyArray<readonly [number, number]>>,
): IdentifierLoss {
  let nll = 0;
  let count = 0;
  let confident = 0;
  const positions: { nll: number; count: number }[] = [];
  spans.forEach((traceSpans, row) => {
    const logp = logps[row] as ArrayLike<number>;
    for (const [start, end] of traceSpans)
      for (let i = start; i < end; i++) {
        const loss = -(logp[i] as number);
        nll += loss;
        count += 1;
        if (loss < Math.LN2) confident += 1;
        positions[i - start] ??= { nll: 0, count: 0 };
        const at = positions[i - start] as { nll: number; count: number };
        at.nll += loss;
        at.count += 1;
      }
  });
  return {
    tokens: count,
    loss: nll / Math.max(1, count),
    confidentShare: confident / Math.max(1, count),
    byPosition: positions.map((p) => ({ tokens: p.count, loss: p.nll / p.count })),
  };
}

/** Copy drills (copy-drills.ts) the probe scores, drawn from a fixed seed: the same for every checkpoint. */
const DRILLS = 32;

/** A checkpoint's copying of ids: the clicked ids' loss, and the loss on copy drills' repeats after their first token. */
export interface IdentifierProbe {
  readonly ids: IdentifierLoss;
  /** Tokens 2+ of each drill's repeat: only a lookup of the token before predicts them. */
  readonly drills: IdentifierLoss;
}

/**
 * The clicked-id loss of a checkpoint on seeded webshop expert episodes that fit its context, and
 * its loss on fresh copy drills after each repeat's first token.
 */
export async function probeIdentifiers(folder: string, episodes: number): Promise<IdentifierProbe> {
  const { policy, tokenizerJson, config } = await loadCheckpoint(new LocalObjectStore(folder), "newest");
  const codec = ChatCodec.fromTokenizerJson(JSON.parse(tokenizerJson));
  try {
    const { traces } = await collectExpertTraces([await loadTaskModule("webshop")], episodes, SEED);
    const logps: Float32Array[] = [];
    const spans: Array<ReadonlyArray<readonly [number, number]>> = [];
    for (const trace of traces) {
      const { tokens, lossMask } = codec.encodeConversation(trace.messages, trace.tools);
      if (tokens.length > config.contextLength) continue;
      const ids = copiedIdentifiers(trace.messages).flatMap((id) => [codec.encode(id), codec.encode(` ${id}`)]);
      logps.push(policy.logProbs([Int32Array.from(tokens)], 1)[0] as Float32Array);
      spans.push(identifierSpans(tokens, lossMask, ids));
    }
    const random = seededRandomFrom(SEED, "copy-drills");
    const drills = Array.from({ length: DRILLS }, () => copyDrill(codec, random));
    const drillSpans = drills.map(
      (d): Array<readonly [number, number]> => [[d.weights.indexOf(1) + 1, d.tokens.length]],
    );
    return {
      ids: identifierLoss(logps, spans),
      drills: identifierLoss(
        policy.logProbs(
          drills.map((d) => d.tokens),
          1,
        ),
        drillSpans,
      ),
    };
  } finally {
    policy.dispose();
  }
}

/** The clicked-id probes side by side: one row per checkpoint. */
export function identifierTable(
  probes: ReadonlyArray<{ folder: string; version: number } & IdentifierProbe>,
  episodes: number,
): string {
  const positions = Math.max(0, ...probes.map((p) => p.ids.byPosition.length));
  const head = [
    "checkpoint",
    "id tokens",
    "loss",
    "p > 0.5",
    ...Array.from({ length: positions }, (_, k) => `token ${k + 1}`),
    "drill loss",
  ];
  const rows = probes.map((p) => [
    `${p.folder} (v${p.version})`,
    String(p.ids.tokens),
    p.ids.loss.toFixed(3),
    p.ids.confidentShare.toFixed(2),
    ...Array.from({ length: positions }, (_, k) => p.ids.byPosition[k]?.loss.toFixed(2) ?? "–"),
    p.drills.loss.toFixed(2),
  ]);
  const caption =
    `Clicked ids: loss per token (nats) on the product ids webshop's expert clicks, copied off the page before ` +
    `each click, ${episodes} seeded train-split episodes (seed ${SEED}), and by token within the id; a guess ` +
    `over the id's 34 characters costs ln 34 = ${Math.log(34).toFixed(2)} per character. Drill loss: per token of ` +
    `${DRILLS} copy drills (a random string of letters and digits, a newline, the string again) after the repeat's ` +
    `first token; a guess over 62 characters costs ln 62 = ${Math.log(62).toFixed(2)}.`;
  return markdownTable(caption, head, rows);
}

/** Drills of each kind the `--drills` table scores, drawn from a fixed seed: the same for every checkpoint. */
const DRILL_SAMPLE = 64;

/** Loss on one kind of drill: the scored span's first token, the tokens after it, and (recall) a number value's first token. */
export interface DrillLoss {
  readonly drills: number;
  readonly firstLoss: number;
  readonly restLoss: number;
  /** Recall drills whose asked value is a number: its first token's loss (a guessed first digit costs ln 10). */
  readonly numberFirstLoss: number | null;
}

export interface DrillProbe {
  /** A random string, a newline, the string again: going on copying (the lookup). */
  readonly copy: DrillLoss;
  /** Key-value pairs and one key asked again: choosing which span to copy. */
  readonly recall: DrillLoss;
  /** A path whose words recur, repeated: copying on past a recurring token. */
  readonly path: DrillLoss;
}

/** A checkpoint's loss on seeded copy, recall and path drills (copy-drills.ts). */
export async function probeDrills(folder: string): Promise<DrillProbe> {
  const { policy, tokenizerJson } = await loadCheckpoint(new LocalObjectStore(folder), "newest");
  const codec = ChatCodec.fromTokenizerJson(JSON.parse(tokenizerJson));
  try {
    const score = (
      kind: string,
      make: (random: () => number) => { tokens: Int32Array; weights: Float32Array; value?: string },
    ): DrillLoss => {
      const random = seededRandomFrom(SEED, "drill-probe", kind);
      const drills = Array.from({ length: DRILL_SAMPLE }, () => make(random));
      const logps = policy.logProbs(
        drills.map((d) => d.tokens),
        1,
      );
      const first = { nll: 0, count: 0 };
      const rest = { nll: 0, count: 0 };
      const numberFirst = { nll: 0, count: 0 };
      drills.forEach((drill, row) => {
        const logp = logps[row] as Float32Array;
        const start = drill.weights.indexOf(1);
        first.nll -= logp[start] as number;
        first.count += 1;
        if (drill.value !== undefined && /^[0-9]/.test(drill.value)) {
          numberFirst.nll -= logp[start] as number;
          numberFirst.count += 1;
        }
        for (let i = start + 1; i < drill.tokens.length; i++) {
          rest.nll -= logp[i] as number;
          rest.count += 1;
        }
      });
      return {
        drills: drills.length,
        firstLoss: first.nll / first.count,
        restLoss: rest.nll / Math.max(1, rest.count),
        numberFirstLoss: numberFirst.count ? numberFirst.nll / numberFirst.count : null,
      };
    };
    return {
      copy: score("copy", (random) => copyDrill(codec, random)),
      recall: score("recall", (random) => recallDrill(codec, random)),
      path: score("path", (random) => pathDrill(codec, random)),
    };
  } finally {
    policy.dispose();
  }
}

/** The drill probes side by side: one row per checkpoint. */
export function drillTable(probes: ReadonlyArray<{ folder: string; version: number } & DrillProbe>): string {
  const head = [
    "checkpoint",
    "copy drills first / rest",
    "recall drills first / rest",
    "recall: a number's first token",
    "path drills first / rest",
  ];
  const pair = (d: DrillLoss) => `${d.firstLoss.toFixed(2)} / ${d.restLoss.toFixed(2)}`;
  const rows = probes.map((p) => [
    `${p.folder} (v${p.version})`,
    pair(p.copy),
    pair(p.recall),
    p.recall.numberFirstLoss?.toFixed(2) ?? "–",
    pair(p.path),
  ]);
  const caption =
    `Drills: loss per token (nats) on ${DRILL_SAMPLE} seeded drills of each kind (copy-drills.ts), the scored span's ` +
    `first token and the tokens after it. Copy: a random string, a newline, the string again (the rest: the lookup). ` +
    `Recall: a few key-value pairs and one key asked again (the first token: choosing which value; a guessed first ` +
    `digit costs ln 10 = ${Math.LN10.toFixed(2)}). Path: a path whose words recur, repeated (the rest: copying on past ` +
    `a recurring token).`;
  return markdownTable(caption, head, rows);
}

/** A caption, a blank line, then a markdown table of `head` and `rows`. */
function markdownTable(caption: string, head: readonly string[], rows: readonly (readonly string[])[]): string {
  return [
    caption,
    "",
    `| ${head.join(" | ")} |`,
    `|${head.map(() => "---").join("|")}|`,
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ].join("\n");
}

export function verdictOf(valueLoss: number, otherLoss: number): "copies" | "guesses" {
  return valueLoss <= COPY_RATIO * otherLoss && valueLoss <= COPY_MAX_LOSS ? "copies" : "guesses";
}

async function lossesOf(folder: string, episodes: number) {
  const { policy, tokenizerJson } = await loadCheckpoint(new LocalObjectStore(folder), "newest");
  const codec = ChatCodec.fromTokenizerJson(JSON.parse(tokenizerJson));
  try {
    const rows = [];
    for (const name of TASKS) {
      const task = await loadTaskModule(name);
      const { traces } = await collectExpertTraces([task], episodes, SEED);
      const value = { nll: 0, count: 0, confident: 0 };
      const other = { nll: 0, count: 0 };
      const question = { nll: 0, count: 0, confident: 0 };
      const numberFirst = { nll: 0, count: 0 };
      const numberRest = { nll: 0, count: 0 };
      const renamed = await renamedWordLoss(policy, codec, task, traces);
      for (const trace of traces) {
        const { tokens, lossMask } = codec.encodeConversation(trace.messages, trace.tools);
        const logp = policy.logProbs([Int32Array.from(tokens)], 1)[0] as Float32Array;
        const answer = committedValue(trace.messages);
        const valueIds = answer === undefined ? [] : codec.encode(answer);
        const start = answerStart(tokens, lossMask, valueIds);
        const inValue = (i: number) => start >= 0 && i >= start && i < start + valueIds.length;
        const words = questionWords(trace.messages).flatMap((w) => [codec.encode(w), codec.encode(` ${w}`)]);
        const fromQuestion = questionWordPositions(tokens, lossMask, words, inValue);
        const numbers = questionNumbers(trace.messages).flatMap((w) => [codec.encode(w), codec.encode(` ${w}`)]);
        for (const [begin, end] of questionWordSpans(tokens, lossMask, numbers, inValue))
          for (let i = begin; i < end; i++) {
            const part = i === begin ? numberFirst : numberRest;
            part.nll -= logp[i] as number;
            part.count += 1;
          }
        for (let i = 0; i < tokens.length; i++) {
          if (lossMask[i] !== 1) continue;
          const nll = -(logp[i] as number);
          if (inValue(i)) {
            value.nll += nll;
            value.count += 1;
            if (nll < Math.log(2)) value.confident += 1;
          } else {
            other.nll += nll;
            other.count += 1;
            if (fromQuestion.has(i)) {
              question.nll += nll;
              question.count += 1;
              if (nll < Math.log(2)) question.confident += 1;
            }
          }
        }
      }
      const valueLoss = value.nll / Math.max(1, value.count);
      const otherLoss = other.nll / Math.max(1, other.count);
      rows.push({
        task: name,
        valueTokens: value.count,
        valueLoss,
        confidentShare: value.confident / Math.max(1, value.count),
        otherTokens: other.count,
        otherLoss,
        ratio: valueLoss / Math.max(otherLoss, Number.MIN_VALUE),
        questionWordTokens: question.count,
        questionWordLoss: question.nll / Math.max(1, question.count),
        questionWordConfidentShare: question.confident / Math.max(1, question.count),
        renamedWordTokens: renamed.count,
        renamedWordLoss: renamed.nll / Math.max(1, renamed.count),
        renamedWordConfidentShare: renamed.confident / Math.max(1, renamed.count),
        renamedFirstLoss: renamed.firstLoss,
        renamedRestLoss: renamed.restLoss,
        renamedSpeltAsAsked: renamed.speltAsAsked,
        questionNumberTokens: numberFirst.count + numberRest.count,
        questionNumberFirstLoss: numberFirst.count ? numberFirst.nll / numberFirst.count : null,
        questionNumberRestLoss: numberRest.count ? numberRest.nll / numberRest.count : null,
        verdict: verdictOf(valueLoss, otherLoss),
      });
    }
    return rows;
  } finally {
    policy.dispose();
  }
}

/** Per task, the frame words and syllables renamed copies draw on: the same for every checkpoint, so made once. */
const renameVocabularies = new Map<string, Promise<{ frame: Set<string>; syllables: Syllables }>>();

function renameVocabulary(task: TaskModule): Promise<{ frame: Set<string>; syllables: Syllables }> {
  const name = task.task.name;
  let vocabulary = renameVocabularies.get(name);
  if (!vocabulary) {
    vocabulary = collectExpertTraces([task], RENAME_SAMPLE, SEED + 1).then(({ traces }) => {
      const frame = frameWordsByTask(traces).get(name) ?? new Set<string>();
      return { frame, syllables: syllablesOf(traces.flatMap((t) => questionWordsInActions(t.messages, frame))) };
    });
    renameVocabularies.set(name, vocabulary);
  }
  return vocabulary;
}

/** The renamed words' loss: in all, and on each word's first token against the tokens after it. */
interface RenamedWordLoss {
  readonly nll: number;
  readonly count: number;
  readonly confident: number;
  /** Mean loss of each spelt word's first token: which word of the question to spell. */
  readonly firstLoss: number;
  /** Mean loss of the tokens after it: once the word is chosen, only a lookup of the question predicts them. */
  readonly restLoss: number;
  /** Share of the spelt words whose tokens occur as they are before the first assistant token (copyable by a lookup). */
  readonly speltAsAsked: number;
}

/**
 * Loss on the renamed words of one question-renamed copy of each trace (question-variants.ts),
 * with the frame words and syllables taken from a larger seeded sample of the task's episodes.
 */
async function renamedWordLoss(
  policy: TransformerPolicy,
  codec: ChatCodec,
  task: TaskModule,
  traces: readonly ExpertTrace[],
): Promise<RenamedWordLoss> {
  const { frame, syllables } = await renameVocabulary(task);
  const random = seededRandomFrom(SEED, "renamed", task.task.name);
  const all = { nll: 0, count: 0, confident: 0 };
  const first = { nll: 0, count: 0 };
  const rest = { nll: 0, count: 0 };
  const spelt = { words: 0, asAsked: 0 };
  for (const trace of traces) {
    const variant = questionVariant(trace.messages, frame, syllables, random);
    if (!variant) continue;
    const original = new Set(questionWordsInActions(trace.messages, frame));
    const fresh = questionWordsInActions(variant, frame).filter((w) => !original.has(w));
    const { tokens, lossMask } = codec.encodeConversation(variant, trace.tools);
    const logp = policy.logProbs([Int32Array.from(tokens)], 1)[0] as Float32Array;
    const words = fresh.flatMap((w) => [codec.encode(w), codec.encode(` ${w}`)]);
    const counted = new Set<number>();
    const prompt = tokens.slice(0, Array.from(lossMask).indexOf(1));
    for (const [start, end] of questionWordSpans(tokens, lossMask, words, () => false)) {
      spelt.words += 1;
      if (occursIn(prompt, tokens.slice(start, end))) spelt.asAsked += 1;
      for (let i = start; i < end; i++) {
        if (counted.has(i)) continue;
        counted.add(i);
        const nll = -(logp[i] as number);
        all.nll += nll;
        all.count += 1;
        if (nll < Math.log(2)) all.confident += 1;
        const part = i === start ? first : rest;
        part.nll += nll;
        part.count += 1;
      }
    }
  }
  return {
    ...all,
    firstLoss: first.nll / Math.max(1, first.count),
    restLoss: rest.nll / Math.max(1, rest.count),
    speltAsAsked: spelt.asAsked / Math.max(1, spelt.words),
  };
}

/** Whether `part` occurs as a contiguous run in `tokens`. */
export function occursIn(tokens: readonly number[], part: readonly number[]): boolean {
  for (let i = 0; i + part.length <= tokens.length; i++) if (matchesAt(tokens, i, part)) return true;
  return false;
}

/**
 * Greedy success per task on the first `n` test instances: the evaluator's `evaluate` against an
 * in-process controller, one env worker per task and a policy server pinned to the folder's
 * newest version, as `agentrl eval --policy <v> --tasks db os --n N` runs them as processes.
 */
async function greedyOf(folder: string, n: number): Promise<Map<string, { success: number; episodes: number }>> {
  const config = parseConfig({ policy: { init: resolve(folder), backend: "wasm" } });
  const log = createLogger({ role: "copy-probe" });
  const concurrency = 8;
  const controller = await startController({ port: 0 });
  const workers = [];
  try {
    for (const name of TASKS)
      workers.push(
        await serveTask(await loadTaskModule(name), { controllerUrl: controller.url, heartbeatMs: 200, concurrency }),
      );
    await Promise.all(workers.map((w) => w.heartbeat()));
    const server = await servePolicy({
      config,
      pool: "current",
      follow: false,
      port: 0,
      log,
      store: new LocalObjectStore(folder),
    });
    try {
      const report = await evaluate({
        controllerUrl: controller.url,
        policy: { url: `${server.url}/v1` },
        policyLabel: `v${server.version()}`,
        tasks: await evalTasks(TASKS, "test", n),
        split: "test",
        concurrency,
        maxTokensPerTurn: config.rollout.maxTokensPerTurn,
        log,
      });
      return new Map(report.tasks.map((t) => [t.task, { success: t.success, episodes: t.episodes }]));
    } finally {
      await server.close();
    }
  } finally {
    for (const worker of workers) await worker.close();
    await controller.close();
  }
}

function recipeOf(folder: string, version: number): string | null {
  const file = join(folder, "sft", `v${version}.json`);
  if (!existsSync(file)) return null;
  const recipe = (JSON.parse(readFileSync(file, "utf8")) as { recipe?: unknown }).recipe;
  return typeof recipe === "string" ? recipe : null;
}

/** Probes one checkpoint folder: its newest version's losses, and greedy success unless n is 0. */
export async function probeCheckpoint(
  folder: string,
  options: { n: number; episodes: number },
): Promise<CheckpointProbe> {
  const store = new LocalObjectStore(folder);
  const loaded = await loadCheckpoint(store, "newest");
  const { config, manifest } = loaded;
  loaded.policy.dispose();
  const losses = await lossesOf(folder, options.episodes);
  const greedy = options.n > 0 ? await greedyOf(folder, options.n) : undefined;
  const tasks = losses.map((row) => {
    const result = greedy?.get(row.task);
    return { ...row, greedySuccess: result?.success ?? null, testInstances: result?.episodes ?? 0 };
  });
  return {
    folder,
    version: manifest.version,
    model: {
      dModel: config.dModel,
      layers: config.layers,
      heads: config.heads,
      kvHeads: config.kvHeads,
      ffnHidden: config.ffnHidden,
      vocabSize: config.vocabSize,
      parameters: parameterCount(config),
    },
    recipe: recipeOf(folder, manifest.version),
    tasks,
    greedyAverage: greedy ? tasks.reduce((sum, t) => sum + (t.greedySuccess ?? 0), 0) / tasks.length : null,
    verdict: tasks.every((t) => t.verdict === "copies") ? "copies" : "guesses",
  };
}

const percent = (share: number | null) => (share === null ? "–" : (100 * share).toFixed(1));

/** The probes side by side: one row per checkpoint, per task the losses, confident share and greedy success. */
export function copyTable(probes: readonly CheckpointProbe[], options: { n: number; episodes: number }): string {
  const head = [
    "checkpoint",
    "model",
    "params",
    ...TASKS.flatMap((t) => [
      `${t} value / other loss`,
      `${t} ratio`,
      `${t} p > 0.5`,
      `${t} question-word loss (p > 0.5)`,
      `${t} renamed-word loss (p > 0.5)`,
      `${t} renamed first / rest`,
      `${t} question numbers first / rest`,
      `${t} greedy %`,
    ]),
    "avg greedy %",
    "verdict",
    "recipe",
  ];
  const rows = probes.map((p) => [
    `${p.folder} (v${p.version})`,
    `d=${p.model.dModel} L=${p.model.layers} h=${p.model.heads}/${p.model.kvHeads} ffn=${p.model.ffnHidden} V=${p.model.vocabSize}`,
    `${(p.model.parameters / 1e6).toFixed(2)}M`,
    ...p.tasks.flatMap((t) => [
      `${t.valueLoss.toFixed(3)} / ${t.otherLoss.toFixed(3)}`,
      `${t.ratio.toFixed(1)}x`,
      t.confidentShare.toFixed(2),
      `${t.questionWordLoss.toFixed(3)} (${t.questionWordConfidentShare.toFixed(2)})`,
      `${t.renamedWordLoss.toFixed(3)} (${t.renamedWordConfidentShare.toFixed(2)})`,
      `${t.renamedFirstLoss.toFixed(2)} / ${t.renamedRestLoss.toFixed(2)}`,
      `${t.questionNumberFirstLoss?.toFixed(2) ?? "–"} / ${t.questionNumberRestLoss?.toFixed(2) ?? "–"}`,
      percent(t.greedySuccess),
    ]),
    percent(p.greedyAverage),
    p.verdict,
    p.recipe === null ? "–" : `\`${p.recipe.replaceAll("|", "\\|")}\``,
  ]);
  const caption =
    `Copy probe: loss per assistant token (nats) on the committed answer value vs every other assistant token, ` +
    `${options.episodes} seeded train-split expert episodes per task (seed ${SEED}); greedy success on the first ` +
    `${options.n} test instances per task${options.n === 0 ? " (skipped)" : ""}; "copies" when every task's value loss ` +
    `is within ${COPY_RATIO}x of its other tokens' loss and at most ln 2 (${COPY_MAX_LOSS.toFixed(3)}) nats. ` +
    `Question-word loss: the assistant tokens (among the other tokens) that spell a word of the task's question, ` +
    `and the share of them with p > 0.5; renamed-word loss: the same on question-renamed copies, where only ` +
    `copying predicts the words; first / rest: a renamed word's first token (which word) and the tokens after it ` +
    `(copying it on); question numbers first / rest: the same for the question's numbers an action spells (drawn ` +
    `per instance, so only copying predicts them); not part of the verdict.`;
  return markdownTable(caption, head, rows);
}

async function main(): Promise<void> {
  process.env.AGENTRL_LOG_LEVEL ??= "warn";
  let args: CopyArgs;
  const argv = process.argv.slice(2);
  if (argv.includes("--help") || argv.includes("-h")) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  try {
    args = await parseCopyArgs(argv);
  } catch (error) {
    if (!(error instanceof CopyArgsError)) throw error;
    process.stderr.write(`bench:copy: ${error.message}\n`);
    process.exit(2);
  }
  await initBackend("wasm");
  const probes: CheckpointProbe[] = [];
  for (const folder of args.folders) probes.push(await probeCheckpoint(folder, args));
  process.stdout.write(`${copyTable(probes, args)}\n`);
  const ids = [];
  if (args.ids)
    for (const probe of probes)
      ids.push({
        folder: probe.folder,
        version: probe.version,
        ...(await probeIdentifiers(probe.folder, args.episodes)),
      });
  if (args.ids) process.stdout.write(`\n${identifierTable(ids, args.episodes)}\n`);
  const drills = [];
  if (args.drills)
    for (const probe of probes)
      drills.push({ folder: probe.folder, version: probe.version, ...(await probeDrills(probe.folder)) });
  if (args.drills) process.stdout.write(`\n${drillTable(drills)}\n`);
  if (args.json)
    process.stdout.write(
      `${JSON.stringify({ bench: "copy", n: args.n, episodes: args.episodes, seed: SEED, checkpoints: probes, ...(args.ids ? { identifiers: ids } : {}), ...(args.drills ? { drills } : {}) })}\n`,
    );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
