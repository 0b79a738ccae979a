import { type ExperimentConfig, type ExperimentConfigInput, parseConfig } from "../../shared/config/index.ts";
import type { ModelConfig } from "../../shared/config/policy.ts";
import { initBackend } from "../../shared/model/backend.ts";
import { saveCheckpoint } from "../../shared/model/checkpoint.ts";
import { createPolicy } from "../../shared/model/transformer.ts";
import type { Trajectory, TrajectoryReady } from "../../shared/protocol/messages.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import type { Transport } from "../../shared/transport/types.ts";

/** A tiny model: trains in milliseconds on the wasm/cpu backend. */
export const TINY_MODEL = {
  vocabSize: 300,
  dModel: 16,
  layers: 1,
  heads: 2,
  kvHeads: 1,
  ffnHidden: 32,
  contextLength: 64,
} as const;

/** Publishes a fresh policy (the tiny one unless `model` says) as `version`: the trainer's starting point. */
export async function publishBase(
  transport: Transport,
  version = 0,
  {
    model = TINY_MODEL,
    tokenizerJson = JSON.stringify({ note: "tokens only; the trainer never decodes" }),
  }: { model?: Partial<ModelConfig>; tokenizerJson?: string } = {},
): Promise<void> {
  await initBackend("cpu");
  const policy = createPolicy(model, 1, { version });
  await saveCheckpoint(transport.store("checkpoints"), policy, { version, step: 0, parent: null, tokenizerJson });
  policy.dispose();
}

/**
 * A synthetic finished episode: 8 prompt tokens (mask 0) then 6 generated tokens (mask 1) from
 * `tokenVersion`, behaviour log-prob -5.7 (≈ log 1/300: what an untrained tiny model assigns).
 */
export function fakeTrajectory(
  experimentId: string,
  groupId: string,
  sample: number,
  reward: number,
  options: { task?: string; tokenVersion?: number; groupSize?: number; seed?: number } = {},
): Trajectory {
  const random = seededRandom(options.seed ?? sample * 31 + groupId.length);
  const tokenIds = Array.from({ length: 14 }, () => 1 + Math.floor(random() * 250));
  const lossMask = tokenIds.map((_, i) => (i >= 8 ? 1 : 0)) as Array<0 | 1>;
  const version = options.tokenVersion ?? 0;
  return {
    schemaVersion: 1,
    trajectoryId: `${groupId}-s${sample}`,
    experimentId,
    groupId,
    task: options.task ?? "db",
    index: 0,
    sample,
    groupSize: options.groupSize ?? 2,
    messages: [],
    tools: [],
    tokenIds,
    lossMask,
    logprobs: lossMask.map((m) => (m ? -5.7 : 0)),
    behaviorLogprobs: "full",
    policyVersion: lossMask.map((m) => (m ? version : -1)),
    policyPool: lossMask.map((m) => (m ? "current" : null)),
    reward,
    envReward: Math.max(reward, 0),
    status: reward > 0 ? "completed" : "agent validation failed",
    turns: 1,
    metrics: {},
    timings: { startedAt: new Date(0).toISOString(), finishedAt: new Date(0).toISOString(), envMs: 0, policyMs: 0 },
    attempt: 0,
  };
}

/** Stores trajectories and announces them, as a rollout worker would. */
export async function deliver(transport: Transport, trajectories: readonly Trajectory[]): Promise<TrajectoryReady[]> {
  const out: TrajectoryReady[] = [];
  for (const t of trajectories) {
    const key = `trajectories/${t.experimentId}/${t.groupId}/${t.trajectoryId}.json`;
    await transport.store("trajectories").put(key, JSON.stringify(t));
    const versions = t.policyVersion.filter((v) => v >= 0);
    const ready: TrajectoryReady = {
      schemaVersion: 1,
      trajectoryId: t.trajectoryId,
      experimentId: t.experimentId,
      groupId: t.groupId,
      groupSize: t.groupSize,
      task: t.task,
      key,
      tokens: t.tokenIds.length,
      reward: t.reward,
      status: t.status,
      minVersion: Math.min(...versions),
      maxVersion: Math.max(...versions),
    };
    await transport.queue("trajectories").send(JSON.stringify(ready));
    out.push(ready);
  }
  return out;
}

/** A trainer experiment on the tiny model and the local transport in `localDir`; `overrides` merge per section. */
export function tinyTrainerConfig(localDir: string, overrides: ExperimentConfigInput = {}): ExperimentConfig {
  return parseConfig({
    experimentId: "tr",
    policy: { backend: "cpu", model: TINY_MODEL },
    rollout: { groupSize: 2, maxTotalTokens: 64, maxTokensPerTurn: 16 },
    ...overrides,
    transport: { localDir, visibilityTimeoutSeconds: 1, ...overrides.transport },
    trainer: { batchSize: 2, warmupFactor: 1, maxSteps: 3, learningRate: 1e-2, ...overrides.trainer },
  });
}
