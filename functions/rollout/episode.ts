import type { ChatCodec } from "../../shared/chat/codec.ts";
import type { RolloutConfig } from "../../shared/config/rollout.ts";
import { type ControllerClient, EnvEpisodeFailedError, isAgentOutcome } from "../../shared/env/client.ts";
import { type PolicyClient, type PolicyEndpoint, PolicyUnavailableError } from "../../shared/policy/client.ts";
import type { SampleStatus } from "../../shared/protocol/envApi.ts";
import type { RolloutRequest, Trajectory } from "../../shared/protocol/messages.ts";
import type { ChatMessage, GenerationTrace } from "../../shared/protocol/openai.ts";
import { TokenLog } from "../../shared/protocol/tokenLog.ts";
import { trajectoryKey } from "../../shared/protocol/trajectoryKeys.ts";
import { hashString, seededRandomFrom } from "../../shared/rl/random.ts";
import type { PolicyPool } from "./pool.ts";

/** The controller calls the agent loop makes (ControllerClient, or a fake in tests). */
export type EnvApi = Pick<ControllerClient, "startSample" | "interact" | "cancel">;
/** The chat-format helpers the agent loop needs (ChatCodec). */
export type EpisodeCodec = Pick<ChatCodec, "promptTokens" | "continuationTokens" | "assistantTokens">;

export interface EpisodeDeps {
  readonly env: EnvApi;
  readonly policy: Pick<PolicyClient, "generate">;
  readonly pool: Pick<PolicyPool, "draw">;
  readonly codec: EpisodeCodec;
  readonly rollout: RolloutConfig;
  /** Experiment seed: cross-policy draws and sampling seeds derive from it. */
  readonly seed: number;
}

/** Stable id of the trajectory of one request: a redelivered request maps to the same id. */
export function trajectoryIdOf(request: Pick<RolloutRequest, "groupId" | "sample">): string {
  return `${request.groupId}-s${request.sample}`;
}

export { trajectoryKey };

function sameTokens(a: readonly number[], b: readonly number[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

/**
 * The behaviour log-probs of one generated turn, of the kind `rollout.behaviorLogprobs` names.
 * A server that does not report sampled log-probs can stand in only where they equal the full
 * ones (no nucleus, temperature > 0); otherwise the turn cannot be recorded exactly.
 */
function behaviourLogprobs(trace: GenerationTrace, rollout: RolloutConfig, pool: string): readonly number[] {
  if (rollout.behaviorLogprobs === "full") return trace.logprobs;
  if (trace.sampled_logprobs) return trace.sampled_logprobs;
  if (rollout.topP === 1 && rollout.temperature > 0) return trace.logprobs;
  throw new PolicyUnavailableError(
    `policy ${pool}: rollout.behaviorLogprobs is "sampled" with top_p ${rollout.topP} / temperature ${rollout.temperature}, but the server reports no sampled_logprobs; use a server that does or set rollout.behaviorLogprobs: full`,
  );
}

/** The attempt whose pool draws and sampling seeds every attempt replays. */
const FIRST_ATTEMPT = 0;

/**
 * One attempt at one rollout request: the agent loop of reference section 3.
 *
 * Prompt tokens (mask 0); per turn a policy drawn from the pool (seeded by trajectory and turn),
 * its generated ids + behaviour log-probs + per-token version and pool (mask 1); the
 * assistant message goes to the environment; its answer becomes observation tokens (mask 0).
 * Stops on `finish`, on `maxTurns` (`task limit reached`) or when the token budget is spent
 * (`agent context limit`). Only agent outcomes are scored (`isAgentOutcome`): a non-completed
 * one gets `incompletePunishment`. Tokens from an external endpoint carry no comparable
 * log-probs, so they are kept as context (mask 0).
 *
 * Environment and infrastructure failures are never scored: an env-side ending (`task error`,
 * `cancelled`, `unknown`, at start_sample or later) throws {@link EnvEpisodeFailedError}, and
 * unreachable env or policy, a lost session or `signal` (timeout, shutdown) propagate; the
 * session is cancelled first and the caller retries with a fresh one.
 */
export async function runEpisode(
  request: RolloutRequest,
  deps: EpisodeDeps,
  signal: AbortSignal,
  attempt = request.attempt,
): Promise<Trajectory> {
  const { env, policy, pool, codec, rollout } = deps;
  const trajectoryId = trajectoryIdOf(request);
  const startedAt = new Date();
  let envMs = 0;
  let policyMs = 0;
  const timed = async <T>(kind: "env" | "policy", work: () => Promise<T>): Promise<T> => {
    const t0 = performance.now();
    try {
      return await work();
    } finally {
      if (kind === "env") envMs += performance.now() - t0;
      else policyMs += performance.now() - t0;
    }
  };

  const started = await timed("env", () => env.startSample(request.task, request.index, { signal }));
  let ended = started.finish;
  try {
    if (started.finish && !isAgentOutcome(started.status))
      throw new EnvEpisodeFailedError(`start_sample: the environment ended the episode as "${started.status}"`);
    const messages: ChatMessage[] = [...started.messages];
    const tools = started.tools;
    const log = new TokenLog();
    log.context(codec.promptTokens(messages, tools));
    // Every attempt draws what the first would have: an infrastructure failure says nothing about
    // the sample, and a seeded run then gives the same trajectories however often load made it retry.
    const random = seededRandomFrom(deps.seed, trajectoryId, FIRST_ATTEMPT, "pool");
    const counters = { retokenizedTurns: 0, staleTurns: 0, externalTurns: 0, truncatedTurns: 0, versionDiscards: 0 };
    let status: SampleStatus = started.finish ? started.status : "running";
    let envReward = started.reward;
    let envMetrics: Record<string, number> = started.metrics;
    let turns = 0;

    while (!ended) {
      if (turns >= rollout.maxTurns) {
        status = "task limit reached";
        break;
      }
      const budget = Math.min(rollout.maxTokensPerTurn, rollout.maxTotalTokens - log.length);
      if (budget <= 0) {
        status = "agent context limit";
        break;
      }
      const endpoint: PolicyEndpoint = pool.draw(random);
      const generation = await timed("policy", () =>
        policy.generate(
          endpoint,
          {
            messages,
            tools,
            temperature: rollout.temperature,
            topP: rollout.topP,
            maxTokens: budget,
            seed: hashString(`${deps.seed}/${trajectoryId}/${FIRST_ATTEMPT}/${turns}`) & 0x7fffffff,
            promptTokenIds: log.tokenIds,
            ...(request.policyVersion === undefined ? {} : { newestVersion: request.policyVersion }),
          },
          signal,
        ),
      );
      turns += 1;
      counters.versionDiscards += generation.versionDiscards ?? 0;
      const prev = messages.slice();
      const trace = generation.trace;
      let generatedIds: readonly number[];
      if (trace && endpoint.requiresTrace) {
        if (trace.prompt_token_ids && !sameTokens(trace.prompt_token_ids, log.tokenIds)) counters.retokenizedTurns += 1;
        if (trace.prompt_truncated) counters.truncatedTurns += 1;
        generatedIds = trace.token_ids;
        log.generated(
          trace.token_ids,
          behaviourLogprobs(trace, rollout, endpoint.pool),
          trace.logprobs,
          trace.policy_versions,
          endpoint.pool,
        );
      } else {
        generatedIds = codec.assistantTokens(prev, generation.message, tools);
        log.context(generatedIds, endpoint.pool);
        counters.externalTurns += 1;
      }
      if (endpoint.pool === "stale") counters.staleTurns += 1;
      messages.push(generation.message);
      if (log.length >= rollout.maxTotalTokens) {
        status = "agent context limit";
        break;
      }
      const answer = await timed("env", () => env.interact(started.sessionId, generation.message, { signal }));
      messages.push(...answer.messages);
      envMetrics = answer.metrics;
      if (answer.finish) {
        ended = true;
        if (!isAgentOutcome(answer.status))
          throw new EnvEpisodeFailedError(`interact: the environment ended the episode as "${answer.status}"`);
        status = answer.status;
        envReward = answer.reward;
        break;
      }
      log.context(codec.continuationTokens([...prev, generation.message], answer.messages, tools, generatedIds));
    }

    const reward = status === "completed" ? envReward : rollout.incompletePunishment;
    const generatedTokens = log.lossMask.reduce<number>((sum, m) => sum + m, 0);
    return {
      schemaVersion: 1,
      trajectoryId,
      experimentId: request.experimentId,
      groupId: request.groupId,
      task: request.task,
      index: request.index,
      sample: request.sample,
      groupSize: request.groupSize,
      messages,
      tools,
      tokenIds: log.tokenIds,
      lossMask: log.lossMask,
      logprobs: log.logprobs,
      behaviorLogprobs: rollout.behaviorLogprobs,
      ...(rollout.behaviorLogprobs === "full" ? {} : { fullLogprobs: log.fullLogprobs }),
      policyVersion: log.policyVersion,
      policyPool: log.policyPool,
      reward,
      envReward,
      status,
      turns,
      metrics: {
        ...envMetrics,
        attempt,
        generated_tokens: generatedTokens,
        retokenized_turns: counters.retokenizedTurns,
        truncated_turns: counters.truncatedTurns,
        stale_turns: counters.staleTurns,
        external_turns: counters.externalTurns,
        // answers of a synced engine discarded because a weight reload may have touched them
        version_discards: counters.versionDiscards,
      },
      timings: { startedAt: startedAt.toISOString(), finishedAt: new Date().toISOString(), envMs, policyMs },
      attempt,
    };
  } finally {
    // an episode that did not end naturally (limits, errors, timeout, shutdown) is cancelled
    if (!ended) await env.cancel(started.sessionId).catch(() => {});
  }
}
