import { existsSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { codecOfVersion } from "../../shared/chat/checkpoint.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { listen } from "../../shared/http.ts";
import type { Logger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { checkpointFolderStore, loadHfPolicy } from "../../shared/model/hf/index.ts";
import { initBackend } from "../../shared/model/index.ts";
import { newestVersion } from "../../shared/protocol/checkpoints.ts";
import { createRoleTransport } from "../../shared/transport/index.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";
import { createPolicyServer } from "./app.ts";
import { CheckpointFollower, type PolicySource, type Pool, targetVersion } from "./follower.ts";

export interface ServePolicyOptions {
  readonly config: ExperimentConfig;
  readonly pool: Pool;
  /** The stale pool serves versions 0, K, 2K, ... @default config.rollout.crossPolicy.staleEvery */
  readonly staleEvery?: number;
  readonly port: number;
  readonly host?: string;
  readonly log: Logger;
  /** false: serve the starting version only (evaluation of a fixed version). @default true */
  readonly follow?: boolean;
  /** Checkpoint store to follow; @default the experiment transport's `checkpoints` store. */
  readonly store?: ObjectStore;
  /** Bearer key required on /v1/* and /stats (AGENTRL_POLICY_API_KEY, like vLLM's --api-key). */
  readonly apiKey?: string;
  /** Where prefill and decode run (see PolicyServerOptions.decodeThread). @default "worker" */
  readonly decodeThread?: "worker" | "main";
  /** Prometheus metrics at GET /metrics. @default - no /metrics */
  readonly metrics?: ServiceMetrics;
}

export interface RunningPolicyServer {
  readonly url: string;
  readonly version: () => number;
  close(): Promise<void>;
}

export class PolicyServerStartError extends AgentRlError {
  override readonly name = "PolicyServerStartError";
}

/** The committed warm-up (policies/v0/), served when neither the store nor `policy.base` names another. */
export const DEFAULT_BASE_POLICY_DIR = fileURLToPath(new URL("../base-policy", import.meta.url));

/** What a server starts on, resolved before any weights load (its first log line says it). */
export interface StartingPolicy {
  /** Store the version is loaded from (the checkpoint store, or a local checkpoint folder). */
  readonly store: ObjectStore;
  readonly version: number;
  /** Human-readable origin: `checkpoint store`, `folder <path>`, `base <path> (the checkpoint store is empty)`. */
  readonly source: string;
}

/**
 * Picks the starting version: `policy.init` as a version number (from the checkpoint store) or a
 * local checkpoint folder (its newest version); `newest` takes the store's newest complete
 * version, and when the store has none yet, version 0 of `policy.base` (default
 * trainer-image/base-policy), so a fresh checkout answers at once instead of waiting.
 */
export async function resolveStartingPolicy(
  config: ExperimentConfig,
  store: ObjectStore,
  pool: Pool,
  staleEvery: number,
): Promise<StartingPolicy> {
  const init = config.policy.init;
  if (/^\d+$/.test(init)) return { store, version: Number(init), source: "checkpoint store" };
  if (init !== "newest") {
    if (!isFolder(init))
      throw new PolicyServerStartError(
        `policy.init "${init}" is not allowed: use "newest", a version number, an existing checkpoint folder or a Hugging Face model folder`,
      );
    // A transformers folder (config.json + safetensors) is imported in memory as version 0.
    const folder = await checkpointFolderStore(init, config.policy.backend);
    const newest = await newestVersion(folder);
    if (newest === undefined) throw new PolicyServerStartError(`policy.init folder ${init} holds no policies/vN/`);
    return { store: folder, version: newest, source: `folder ${init}` };
  }
  const newest = await newestVersion(store);
  if (newest !== undefined)
    return {
      store,
      version: targetVersion(pool, newest, staleEvery, config.trainer.checkpointEvery),
      source: "checkpoint store",
    };
  const base = config.policy.base ?? DEFAULT_BASE_POLICY_DIR;
  if (!isFolder(base))
    throw new PolicyServerStartError(
      `the checkpoint store holds no policy version and policy.base "${base}" is not a checkpoint or Hugging Face folder; publish one with \`agentrl policy publish --from DIR\``,
    );
  const folder = await checkpointFolderStore(base, config.policy.backend);
  if ((await newestVersion(folder)) === undefined)
    throw new PolicyServerStartError(`policy.base folder ${base} holds no policies/vN/`);
  // v0 exactly: the base is what a run imports as v0, so version numbers keep their meaning.
  return { store: folder, version: 0, source: `base ${base} (the checkpoint store is empty)` };
}

/**
 * Starts a policy server on the experiment's checkpoint store: serves the starting version
 * (see resolveStartingPolicy) and, unless pinned, polls the store for newer ones (see
 * CheckpointFollower for why polling). Its first log line names the version and where it comes from.
 */
export async function servePolicy(options: ServePolicyOptions): Promise<RunningPolicyServer> {
  const { config, pool, log } = options;
  const staleEvery = options.staleEvery ?? config.rollout.crossPolicy.staleEvery;
  const transport = options.store ? undefined : await createRoleTransport(config, "policy");
  const store = options.store ?? (transport?.store("checkpoints") as ObjectStore);
  // before resolving: a Hugging Face folder named by policy.init is imported into TF.js tensors
  const backend = await initBackend(config.policy.backend);
  const starting = await resolveStartingPolicy(config, store, pool, staleEvery);
  const first = starting.version;
  log.info(
    { policyVersion: first, source: starting.source, pool, follow: options.follow ?? true },
    `serving policy v${first} from ${starting.source}${(options.follow ?? true) ? ", following the checkpoint store" : " (pinned)"}`,
  );
  log.info({ backend }, "tf.js backend ready");
  const loaded = await loadCheckpoint(starting.store, first);
  // An imported model keeps its own chat template (hf.json); the rollout workers load the same codec.
  const codec = await codecOfVersion(starting.store, loaded.manifest);
  if (codec.tokenizer.size > loaded.config.vocabSize)
    throw new PolicyServerStartError(
      `tokenizer has ${codec.tokenizer.size} ids but the model's vocabSize is ${loaded.config.vocabSize}`,
    );
  const server = createPolicyServer({
    policy: loaded.policy,
    codec,
    log,
    maxBatch: config.policy.maxBatch,
    pool,
    loadWeights: loadHfPolicy,
    limits: config.limits,
    versionFor: (newest) => targetVersion(pool, newest, staleEvery, config.trainer.checkpointEvery),
    ...(options.apiKey ? { apiKey: options.apiKey } : {}),
    ...(options.decodeThread ? { decodeThread: options.decodeThread } : {}),
    ...(options.metrics ? { metrics: options.metrics } : {}),
  });

  try {
    await server.ready;
  } catch (error) {
    await server.close();
    throw new PolicyServerStartError(`the decode worker did not start: ${(error as Error).message}`, { cause: error });
  }

  const source: PolicySource = {
    newestVersion: () => newestVersion(store),
    load: async (version) => (await loadCheckpoint(store, version)).policy,
  };
  const follower = new CheckpointFollower(source, {
    pool,
    staleEvery,
    publishEvery: config.trainer.checkpointEvery,
    pollSeconds: config.policy.pollSeconds,
    currentVersion: server.version,
    install: (policy) => server.install(policy),
    log,
  });
  if (options.follow ?? true) follower.start();
  const http = await listen(server.app, options.port, options.host ?? "127.0.0.1", config.limits.http);
  log.info({ url: http.url, pool, policyVersion: first, staleEvery }, "policy server listening");
  return {
    url: http.url,
    version: server.version,
    async close() {
      // The poll in flight may be installing a version: the stopping server refuses that switch,
      // so the poll settles instead of holding the close.
      const polled = follower.stop();
      await http.close();
      await server.close();
      await polled;
      await transport?.close();
    },
  };
}

function isFolder(path: string): boolean {
  return !/^(newest|\d+)$/.test(path) && existsSync(path) && statSync(path).isDirectory();
}
