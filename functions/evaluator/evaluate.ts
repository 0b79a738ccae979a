import { ControllerClient, EnvApiError, EnvCapacityError } from "../../shared/env/client.ts";
import type { Logger } from "../../shared/log.ts";
import { PolicyClient, type PolicyEndpoint, PolicyRequestError } from "../../shared/policy/client.ts";
import type { SampleStatus } from "../../shared/protocol/envApi.ts";
import type { EvalReport } from "../../shared/protocol/metrics.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { sleep } from "../../shared/sleep.ts";

export interface EvalTask {
  readonly name: string;
  /** Instance indices to play (e.g. the first N of the task's test split). */
  readonly indices: readonly number[];
  /** Each index's kind (DBBench's question type), where the task has kinds: success is also reported per kind. */
  readonly categories?: Readonly<Record<number, string>>;
}

export interface EvalOptions {
  readonly controllerUrl: string;
  /** OpenAI-compatible base URL and model name of the policy under evaluation. */
  /** `apiKey` is sent as a bearer token (hosted baselines, or our servers' key). */
  readonly policy: { readonly url: string; readonly model?: string; readonly apiKey?: string };
  /** Bearer key of the controller's session API (AGENTRL_CONTROLLER_SECRET), when it requires one. */
  readonly controllerToken?: string;
  /** Label in the report (`v3`, a URL, a model name). */
  readonly policyLabel: string;
  readonly tasks: readonly EvalTask[];
  readonly split: "train" | "test";
  /** Episodes in flight at once. @default 8 */
  readonly concurrency?: number;
  /** @default 0 (greedy) */
  readonly temperature?: number;
  /** Nucleus sampling of sampled episodes, as the rollouts use it. @default 1 */
  readonly topP?: number;
  /**
   * Episodes per instance (each with its own seed); above 1 the report adds pass@k and the share
   * of instances whose samples disagree — the groups GRPO can learn from. @default 1
   */
  readonly samples?: number;
  readonly maxTokensPerTurn?: number;
  /** Turn cap on our side, on top of the environment's own. @default 30 */
  readonly maxTurns?: number;
  /** First wait before retrying a failed episode, doubled each attempt (at most 10 s). @default 500 */
  readonly retryBackoffMs?: number;
  /**
   * How long an episode waits, in all, for a free env slot (HTTP 406) before failing: slots can be
   * held for a while by sessions another process left behind until they expire. @default 300000
   */
  readonly capacityWaitMs?: number;
  /** Called with every scored episode's whole conversation (`agentrl eval --transcripts`). */
  readonly onTranscript?: (transcript: EpisodeTranscript) => void;
  readonly log?: Logger;
  readonly signal?: AbortSignal;
}

/** Failed attempts of one episode before the evaluation fails. */
const MAX_ATTEMPTS = 5;

export interface EpisodeOutcome {
  readonly task: string;
  readonly index: number;
  /** Which of the instance's samples (0 when one per instance). */
  readonly sample: number;
  readonly status: SampleStatus;
  /** The environment's reward (no incomplete-episode punishment: evaluation reports task success). */
  readonly reward: number;
  readonly turns: number;
}

/** One scored episode with its conversation: the task's prompt, each reply and each observation. */
export interface EpisodeTranscript extends EpisodeOutcome {
  readonly messages: readonly ChatMessage[];
}

/**
 * Plays one evaluation episode at the message level: works with any OpenAI-compatible policy,
 * needs no token ids. A prompt the policy rejects as too long ends the episode as
 * `agent context limit`, as AgentBench scores it.
 */
export async function playEpisode(
  env: ControllerClient,
  policy: PolicyClient,
  endpoint: PolicyEndpoint,
  task: string,
  index: number,
  options: Pick<EvalOptions, "temperature" | "topP" | "maxTokensPerTurn" | "maxTurns" | "signal"> & {
    /** Sampling seed. @default index */
    seed?: number;
  },
): Promise<Omit<EpisodeTranscript, "sample">> {
  const sample = await env.startSample(task, index, { signal: options.signal });
  const messages: ChatMessage[] = [...sample.messages];
  let status = sample.status;
  let reward = sample.reward;
  let turns = 0;
  let finish = sample.finish;
  try {
    while (!finish && turns < (options.maxTurns ?? 30)) {
      let reply: AssistantMessage;
      try {
        const generation = await policy.generate(
          endpoint,
          {
            messages,
            tools: sample.tools,
            temperature: options.temperature ?? 0,
            topP: options.topP ?? 1,
            maxTokens: options.maxTokensPerTurn ?? 256,
            seed: options.seed ?? index,
          },
          options.signal,
        );
        reply = generation.message;
      } catch (error) {
        if (error instanceof PolicyRequestError && error.status === 400) {
          status = "agent context limit";
          break;
        }
        throw error;
      }
      messages.push(reply);
      turns += 1;
      const turn = await env.interact(sample.sessionId, reply, {
        signal: options.signal,
      });
      messages.push(...turn.messages);
      ({ finish, status, reward } = turn);
    }
    if (!finish && status === "running") status = "task limit reached";
  } finally {
    if (!finish) await env.cancel(sample.sessionId).catch(() => {});
  }
  return { task, index, status, reward, turns, messages };
}

/**
 * Evaluates a policy on held-out instances of each task and returns the success table.
 * Success of an episode is its environment reward clamped to [0, 1] when it completed (binary
 * for ALFWorld/DB/KG/OS; WebShop's graded score, as AgentBench reports it), 0 otherwise.
 * Infrastructure failures are retried with a fresh session, never scored.
 */
export async function evaluate(options: EvalOptions): Promise<EvalReport> {
  const env = new ControllerClient({
    baseUrl: options.controllerUrl,
    ...(options.controllerToken ? { token: options.controllerToken } : {}),
  });
  const policy = new PolicyClient(300_000);
  const endpoint: PolicyEndpoint = {
    pool: "eval",
    url: options.policy.url,
    model: options.policy.model ?? "agentrl",
    requiresTrace: false,
    ...(options.policy.apiKey ? { apiKey: options.policy.apiKey } : {}),
  };
  const samples = options.samples ?? 1;
  const jobs = options.tasks.flatMap((t) =>
    t.indices.flatMap((index) => Array.from({ length: samples }, (_, sample) => ({ task: t.name, index, sample }))),
  );
  const outcomes: EpisodeOutcome[] = [];
  let next = 0;
  const backoff = options.retryBackoffMs ?? 500;
  const capacityWaitMs = options.capacityWaitMs ?? 300_000;
  const worker = async () => {
    while (next < jobs.length) {
      const job = jobs[next++] as { task: string; index: number; sample: number };
      let waited = 0;
      for (let attempt = 0; ; ) {
        try {
          // Seeds are distinct per (instance, sample) and equal the index when there is one sample.
          const seed = job.index * samples + job.sample;
          const { messages, ...outcome } = await playEpisode(env, policy, endpoint, job.task, job.index, {
            ...options,
            seed,
          });
          outcomes.push({ ...outcome, sample: job.sample });
          options.onTranscript?.({ ...outcome, sample: job.sample, messages });
          break;
        } catch (error) {
          if (options.signal?.aborted) throw error;
          // Every slot taken is a wait, not a failure: it does not use up the episode's attempts.
          if (error instanceof EnvCapacityError && waited < capacityWaitMs) {
            const ms = Math.min(backoff * 2, capacityWaitMs - waited);
            waited += ms;
            await sleep(ms, options.signal);
            continue;
          }
          const retryable = error instanceof EnvApiError ? error.retryable : !(error instanceof PolicyRequestError);
          if (!retryable || attempt >= MAX_ATTEMPTS - 1) throw error;
          options.log?.warn(
            { err: error, ...job, attempt },
            "evaluation episode failed; retrying with a fresh session",
          );
          await sleep(Math.min(10_000, backoff * 2 ** attempt), options.signal);
          attempt += 1;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(options.concurrency ?? 8, jobs.length) }, worker));
  return summarize(options.policyLabel, options.split, options.tasks, outcomes, samples);
}

export function episodeSuccess(outcome: Pick<EpisodeOutcome, "status" | "reward">): number {
  return outcome.status === "completed" ? Math.min(1, Math.max(0, outcome.reward)) : 0;
}

export function summarize(
  policyLabel: string,
  split: "train" | "test",
  tasks: readonly EvalTask[],
  outcomes: readonly EpisodeOutcome[],
  samples = 1,
): EvalReport {
  const rows = tasks.map((t) => {
    const mine = outcomes.filter((o) => o.task === t.name);
    const statuses: Record<string, number> = {};
    for (const o of mine) statuses[o.status] = (statuses[o.status] ?? 0) + 1;
    const mean = (f: (o: EpisodeOutcome) => number) =>
      mine.length ? mine.reduce((s, o) => s + f(o), 0) / mine.length : 0;
    const row = {
      task: t.name,
      episodes: mine.length,
      success: mean(episodeSuccess),
      meanReward: mean((o) => o.reward),
      meanTurns: mean((o) => o.turns),
      statuses,
    };
    const withKinds = t.categories ? { ...row, categories: successByCategory(t.categories, mine) } : row;
    return samples > 1 ? { ...withKinds, ...samplingStats(t.indices, mine, samples) } : withKinds;
  });
  return {
    schemaVersion: 1,
    policy: policyLabel,
    split,
    createdAt: new Date().toISOString(),
    tasks: rows,
    averageSuccess: rows.length ? rows.reduce((s, r) => s + r.success, 0) / rows.length : 0,
    outcomes: [...outcomes]
      .sort((a, b) => a.task.localeCompare(b.task) || a.index - b.index || a.sample - b.sample)
      .map((o) => ({ task: o.task, index: o.index, sample: o.sample, status: o.status, success: episodeSuccess(o) })),
  };
}

/** Success per instance kind, as benchmarks with kinds (DBBench's question types) report it. */
export function successByCategory(
  categories: Readonly<Record<number, string>>,
  outcomes: readonly EpisodeOutcome[],
): Record<string, { episodes: number; success: number }> {
  const sums: Record<string, { episodes: number; success: number }> = {};
  for (const outcome of outcomes) {
    const kind = categories[outcome.index] ?? "unknown";
    const entry = sums[kind] ?? { episodes: 0, success: 0 };
    sums[kind] = entry;
    entry.episodes += 1;
    entry.success += episodeSuccess(outcome);
  }
  for (const entry of Object.values(sums)) entry.success /= entry.episodes;
  return sums;
}

/**
 * Over the instances of one task, each played `samples` times: pass@k (the best of its samples'
 * successes, averaged; for binary tasks the share solved at least once) and the share of
 * instances whose samples' successes differ (a GRPO group over them has a non-zero advantage).
 */
export function samplingStats(
  indices: readonly number[],
  outcomes: readonly EpisodeOutcome[],
  samples: number,
): { samples: number; passAtK: number; mixedShare: number } {
  let best = 0;
  let mixed = 0;
  for (const index of indices) {
    const successes = outcomes.filter((o) => o.index === index).map(episodeSuccess);
    if (successes.length === 0) continue;
    best += Math.max(...successes);
    if (Math.min(...successes) !== Math.max(...successes)) mixed += 1;
  }
  const n = Math.max(1, indices.length);
  return { samples, passAtK: best / n, mixedShare: mixed / n };
}
