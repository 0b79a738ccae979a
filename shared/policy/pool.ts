import type { RolloutConfig } from "../config/rollout.ts";
import type { PolicyEndpoint } from "./client.ts";
import type { PolicyDialect } from "./dialect.ts";
import type { EngineVersionWatch } from "./engine-sync.ts";

/** `current` serves every new version; `stale` serves every K-th (versions 0, K, 2K, ...). */
export type Pool = "current" | "stale";

/**
 * The version a pool should serve when `newest` is the newest published. The stale pool takes
 * the last multiple of `staleEvery`, rounded down to a published version: the trainer makes a
 * version every step but publishes only every `publishEvery`-th (trainer.checkpointEvery).
 */
export function targetVersion(pool: Pool, newest: number, staleEvery: number, publishEvery = 1): number {
  if (pool === "current") return newest;
  const stale = newest - (newest % staleEvery);
  return stale - (stale % publishEvery);
}

/** URLs of our own policy servers (OpenAI base URLs). */
export interface PoolUrls {
  /** Server following the newest version. */
  readonly current: string;
  /** Server following every K-th version; without it the stale share goes to `current`. */
  readonly stale?: string;
  /** Model name sent to our servers. @default "agentrl" */
  readonly model?: string;
  /** How the current and stale servers report tokens: our own servers, or vLLM/SGLang-style engines. @default "agentrl" */
  readonly dialect?: PolicyDialect;
  /** Bearer key of our servers (AGENTRL_POLICY_API_KEY); never sent to external endpoints. */
  readonly apiKey?: string;
  /**
   * `rollout.versionSource: sync`: the sync record of the engine behind `current` labels its
   * answers (see {@link syncedVersionWatch}). The stale pool keeps the versions its answers name.
   */
  readonly versionSync?: EngineVersionWatch;
}

/** A pool member and its per-turn probability. */
export interface PoolMember {
  readonly endpoint: PolicyEndpoint;
  readonly probability: number;
}

/**
 * Cross-policy sampling (reference section 1.3): at every assistant turn the policy that acts is
 * drawn from the pool — stale with `staleProbability`, each external endpoint with its own
 * probability, the current policy with the rest. With `crossPolicy.enabled: false` every turn
 * goes to the current policy.
 * @example new PolicyPool(config.rollout, { current: "http://127.0.0.1:8001/v1" }).draw(Math.random)
 */
export class PolicyPool {
  readonly members: readonly PoolMember[];

  constructor(rollout: RolloutConfig, urls: PoolUrls) {
    const model = urls.model ?? "agentrl";
    const dialect = urls.dialect ?? "agentrl";
    const ours = urls.apiKey === undefined ? {} : { apiKey: urls.apiKey };
    if (urls.versionSync && dialect !== "vllm")
      throw new RangeError(
        `rollout.versionSource "sync" labels vLLM-dialect answers; our policy server (dialect "${dialect}") labels its own tokens: use --dialect vllm or rollout.versionSource: response`,
      );
    const current: PolicyEndpoint = {
      pool: "current",
      url: urls.current,
      model,
      requiresTrace: true,
      dialect,
      ...ours,
      ...(urls.versionSync ? { versionSync: urls.versionSync } : {}),
    };
    const cross = rollout.crossPolicy;
    if (!cross.enabled) {
      this.members = [{ endpoint: current, probability: 1 }];
      return;
    }
    const members: PoolMember[] = [];
    if (urls.stale && cross.staleProbability > 0)
      members.push({
        endpoint: { pool: "stale", url: urls.stale, model, requiresTrace: true, dialect, ...ours },
        probability: cross.staleProbability,
      });
    for (const external of cross.external)
      if (external.probability > 0)
        members.push({
          endpoint: {
            pool: `external:${external.model}`,
            url: external.url,
            model: external.model,
            requiresTrace: false,
          },
          probability: external.probability,
        });
    const taken = members.reduce((sum, m) => sum + m.probability, 0);
    if (taken > 1 + 1e-9) throw new RangeError(`cross-policy probabilities sum to ${taken}; at most 1 is allowed`);
    this.members = [{ endpoint: current, probability: Math.max(0, 1 - taken) }, ...members];
  }

  /** Draws one member with a uniform number from `random` (seeded by the caller). */
  draw(random: () => number): PolicyEndpoint {
    let u = random();
    for (const member of this.members) {
      if (u < member.probability) return member.endpoint;
      u -= member.probability;
    }
    return (this.members[0] as PoolMember).endpoint;
  }
}
