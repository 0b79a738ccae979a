import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { loadTaskModule } from "../../env-images/registry.ts";
import { type EpisodeTranscript, type EvalTask, episodeSuccess, evaluate } from "../../functions/evaluator/evaluate.ts";
import { ValidationError } from "../../shared/errors.ts";
import type { Logger } from "../../shared/log.ts";
import type { EvalReport } from "../../shared/protocol/metrics.ts";
import { evalReportMarkdown } from "../report/report.ts";

/** The first `n` instances of each task's split, read from the task modules themselves. */
export async function evalTasks(names: readonly string[], split: "train" | "test", n: number): Promise<EvalTask[]> {
  return Promise.all(
    names.map(async (name) => {
      const { task } = await loadTaskModule(name);
      const range = task.splits[split];
      const count = Math.min(n, range.end - range.start);
      const indices = Array.from({ length: count }, (_, i) => range.start + i);
      if (!task.categoryOf) return { name, indices };
      const categories: Record<number, string> = {};
      for (const index of indices) categories[index] = task.categoryOf(index) ?? "unknown";
      return { name, indices, categories };
    }),
  );
}

/** How an evaluation decodes: greedy (temperature 0), or sampled k times per instance. */
export interface EvalSampling {
  readonly temperature: number;
  readonly topP: number;
  readonly samples: number;
}

/** What a policy's label adds for a sampled evaluation: ` T=1 p=0.9 k=8`, or nothing when greedy. */
export function samplingSuffix({ temperature, topP, samples }: EvalSampling): string {
  if (temperature === 0) return "";
  return ` T=${temperature}${topP < 1 ? ` p=${topP}` : ""}${samples > 1 ? ` k=${samples}` : ""}`;
}

/** One policy an evaluation plays: a version of the run's store, or an OpenAI-compatible URL. */
export type EvalTarget =
  | { readonly version: number; readonly url?: undefined }
  | { readonly url: string; readonly version?: undefined };

/** How a policy is named in an evaluation's tables, and the stem of its report files. */
export interface EvalLabel {
  readonly label: string;
  readonly fileStem: string;
}

/**
 * Names each policy of one evaluation: `vN` for a version, the `--model` name (else the URL) for an
 * endpoint, with the sampling suffix. An endpoint whose name another policy has too (two endpoints
 * serving one model, `--model v0` beside version 0) is told apart by its URL, and report files whose names would clash get `-2`, `-3`. A policy given twice (the same
 * version, or the same URL) is refused.
 */
export function evalLabels(
  targets: readonly EvalTarget[],
  model: string | undefined,
  sampling: EvalSampling,
): EvalLabel[] {
  const key = (t: EvalTarget) => (t.version === undefined ? new URL(t.url).href : `v${t.version}`);
  const keys = targets.map(key);
  const twice = keys.find((k, i) => keys.indexOf(k) !== i);
  if (twice !== undefined)
    throw new ValidationError("eval options", [
      { path: "--policy", message: `names ${twice} twice (give each version or URL once)` },
    ]);
  const plain = targets.map((t) => (t.version === undefined ? (model ?? t.url) : `v${t.version}`));
  const stems = new Set<string>();
  return targets.map((t, i) => {
    const shared = plain.indexOf(plain[i] as string) !== plain.lastIndexOf(plain[i] as string);
    const name = t.url !== undefined && shared ? `${plain[i]} (${t.url})` : (plain[i] as string);
    const label = `${name}${samplingSuffix(sampling)}`;
    const base = evalFileStem(label);
    let fileStem = base;
    for (let n = 2; stems.has(fileStem); n++) fileStem = `${base}-${n}`;
    stems.add(fileStem);
    return { label, fileStem };
  });
}

/** The stem of a policy's report files (`eval-<stem>.json`, `.md`): its label, file-name safe. */
export function evalFileStem(label: string): string {
  return `eval-${label.replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 60)}`;
}

export interface EvalRunOptions {
  readonly controllerUrl: string;
  readonly policyUrl: string;
  readonly model?: string;
  /** Bearer token for an external policy endpoint (a hosted baseline). */
  readonly apiKey?: string;
  /** Bearer key for the policy server; give it only for our own servers. */
  readonly policyApiKey?: string;
  readonly controllerToken?: string;
  readonly label: string;
  /** Names the report files. @default evalFileStem(label) */
  readonly fileStem?: string;
  readonly tasks: readonly EvalTask[];
  readonly split: "train" | "test";
  readonly maxTokensPerTurn: number;
  readonly concurrency: number;
  /** How the policy decodes. @default greedy, one episode per instance */
  readonly sampling?: EvalSampling;
  /** Writes `<outDir>/<fileStem>.json` and `.md`. */
  readonly outDir: string;
  /** Also writes `<outDir>/<fileStem>.transcripts.jsonl`: every episode's conversation. @default false */
  readonly transcripts?: boolean;
  readonly log?: Logger;
  readonly signal?: AbortSignal;
}

/** Evaluates one policy, writes its table as JSON and Markdown, and returns the report. */
export async function runEval(options: EvalRunOptions): Promise<EvalReport> {
  const transcripts: EpisodeTranscript[] = [];
  const report = await evaluate({
    controllerUrl: options.controllerUrl,
    policy: {
      url: options.policyUrl,
      ...(options.model ? { model: options.model } : {}),
      ...(options.apiKey || options.policyApiKey ? { apiKey: options.apiKey ?? options.policyApiKey } : {}),
    },
    ...(options.controllerToken ? { controllerToken: options.controllerToken } : {}),
    policyLabel: options.label,
    tasks: options.tasks,
    split: options.split,
    concurrency: options.concurrency,
    maxTokensPerTurn: options.maxTokensPerTurn,
    ...(options.sampling ?? {}),
    ...(options.transcripts ? { onTranscript: (t: EpisodeTranscript) => transcripts.push(t) } : {}),
    ...(options.log ? { log: options.log } : {}),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const stem = options.fileStem ?? evalFileStem(options.label);
  await writeFile(join(options.outDir, `${stem}.json`), `${JSON.stringify(report, null, 2)}\n`);
  await writeFile(join(options.outDir, `${stem}.md`), `${evalReportMarkdown([report])}\n`);
  if (options.transcripts)
    await writeFile(join(options.outDir, `${stem}.transcripts.jsonl`), transcriptLines(transcripts));
  return report;
}

/**
 * One JSON line per episode, in the report's order (task, instance, sample), each with its
 * success as the report scores it, so `grep '"success":0'` finds the failures to read.
 */
export function transcriptLines(transcripts: readonly EpisodeTranscript[]): string {
  return [...transcripts]
    .sort((a, b) => a.task.localeCompare(b.task) || a.index - b.index || a.sample - b.sample)
    .map(
      ({ messages, ...outcome }) => `${JSON.stringify({ ...outcome, success: episodeSuccess(outcome), messages })}\n`,
    )
    .join("");
}
