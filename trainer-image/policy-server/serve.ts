import { existsSync, statSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { ChatCodec } from "../../shared/chat/index.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { listen } from "../../shared/http.ts";
import type { Logger } from "../../shared/log.ts";
import { loadCheckpoint, newestVersion } from "../../shared/model/checkpoint.ts";
import { initBackend } from "../../shared/model/index.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
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
}

export interface RunningPolicyServer {
  readonly url: string;
  readonly version: () => number;
  close(): Promise<void>;
}

export class PolicyServerStartError extends AgentRlError {
  override readonly name = "PolicyServerStartError";
}

/**
 * Starts a policy server on the experiment's checkpoint store: loads the starting version
 * (`policy.init`: `newest`, a version number, or a local folder laid out as a store, i.e. holding
 * `policies/vN/`), waits for a first version when the store is still empty, serves it, and polls
 * for newer ones (see CheckpointFollower for why polling).
 */
export async function servePolicy(options: ServePolicyOptions): Promise<RunningPolicyServer> {
  const { config, pool, log } = options;
  const staleEvery = options.staleEvery ?? config.rollout.crossPolicy.staleEvery;
  const backend = await initBackend(config.policy.backend);
  log.info({ backend }, "tf.js backend ready");

  const transport = options.store ? undefined : await createTransport(config.transport);
  const store = options.store ?? (transport?.store("checkpoints") as ObjectStore);
  const init = config.policy.init;
  if (!/^(newest|\d+)$/.test(init) && !isFolder(init))
    throw new PolicyServerStartError(
      `policy.init "${init}" is not allowed: use "newest", a version number, or an existing checkpoint folder`,
    );
  const initStore = isFolder(init) ? new LocalObjectStore(init) : store;

  let first: number | undefined;
  if (/^\d+$/.test(init)) first = Number(init);
  else {
    for (let polls = 0; first === undefined; polls++) {
      const newest = await newestVersion(initStore);
      if (newest !== undefined) first = targetVersion(pool, newest, staleEvery);
      else {
        if (initStore !== store) throw new PolicyServerStartError(`policy.init folder ${init} holds no policies/vN/`);
        if (polls % 30 === 0)
          log.info("no policy version in the checkpoint store yet; waiting (run `agentrl sft --store`)");
        await sleep(config.policy.pollSeconds * 1000);
      }
    }
  }
  const loaded = await loadCheckpoint(initStore, first);
  const codec = ChatCodec.fromTokenizerJson(JSON.parse(loaded.tokenizerJson));
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
    limits: config.limits,
    ...(options.apiKey ? { apiKey: options.apiKey } : {}),
  });

  const source: PolicySource = {
    newestVersion: () => newestVersion(store),
    load: async (version) => (await loadCheckpoint(store, version)).policy,
  };
  const follower = new CheckpointFollower(source, {
    pool,
    staleEvery,
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
      await follower.stop();
      await http.close();
      await server.close();
      await transport?.close();
    },
  };
}

function isFolder(path: string): boolean {
  return !/^(newest|\d+)$/.test(path) && existsSync(path) && statSync(path).isDirectory();
}
