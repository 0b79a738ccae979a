/** The rollout role: the agent loop with cross-policy sampling, as a queue consumer. */
import { newestCodec } from "../../shared/chat/checkpoint.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { ControllerClient } from "../../shared/env/client.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import { EngineRecordError, EngineVersionWatch, engineRecordKey } from "../../shared/policy/engine-sync.ts";
import { readSecrets, type Secrets } from "../../shared/security/secrets.ts";
import type { ObjectStore, Transport } from "../../shared/transport/types.ts";
import { PolicyPool, type PoolUrls } from "./pool.ts";
import type { RolloutWorkerOptions } from "./worker.ts";

export * from "./episode.ts";
export * from "./pool.ts";
export * from "./worker.ts";

/**
 * `rollout.versionSource: sync`: the watch over the sync record of the engine `rollout.syncEngine`
 * (undefined for `response`). Refuses the pool, naming the config fields, when no record appears
 * within `waitMs`: then no trainer syncs that engine and none of its answers could be attributed.
 * @example const versionSync = await syncedVersionWatch(config, transport.store("checkpoints"));
 */
export async function syncedVersionWatch(
  config: ExperimentConfig,
  checkpoints: Pick<ObjectStore, "getText">,
  options: { readonly waitMs?: number; readonly log?: Logger; readonly signal?: AbortSignal } = {},
): Promise<EngineVersionWatch | undefined> {
  const { rollout } = config;
  if (rollout.versionSource !== "sync") return undefined;
  const engineId = rollout.syncEngine as string; // the schema requires it with "sync"
  const log = options.log ?? createLogger({ role: "rollout", experimentId: config.experimentId });
  const watch = new EngineVersionWatch(checkpoints, engineId, {
    retries: rollout.syncRetries,
    onDiscard: ({ before, after }) =>
      log.warn(
        { engine: engineId, before: { version: before.version, seq: before.seq }, after },
        "answer straddled a weight reload of the engine: discarded, asking again",
      ),
  });
  const waitMs = options.waitMs ?? 60_000;
  const deadline = Date.now() + waitMs;
  while ((await watch.fresh()) === undefined) {
    if (Date.now() >= deadline || options.signal?.aborted)
      throw new EngineRecordError(
        `rollout.versionSource is "sync" but ${engineRecordKey(engineId)} did not appear in the checkpoint store within ${waitMs} ms: ` +
          `the trainer writes it when it syncs the engine whose policy.syncEngines[].id is "${engineId}" (rollout.syncEngine); ` +
          `sync that engine, or set rollout.versionSource: response for an endpoint that reports its version`,
      );
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  return watch;
}

/** Everything a worker needs beyond config and transport, from URLs. */
export async function rolloutDepsFromUrls(
  config: ExperimentConfig,
  transport: Transport,
  urls: PoolUrls & { readonly controller: string },
  signal?: AbortSignal,
  secrets: Secrets = readSecrets(),
  options: { readonly recordWaitMs?: number; readonly log?: Logger } = {},
): Promise<Pick<RolloutWorkerOptions, "env" | "pool" | "codec">> {
  const versionSync = await syncedVersionWatch(config, transport.store("checkpoints"), {
    ...(options.recordWaitMs === undefined ? {} : { waitMs: options.recordWaitMs }),
    ...(options.log ? { log: options.log } : {}),
    ...(signal ? { signal } : {}),
  });
  return {
    env: new ControllerClient({
      baseUrl: urls.controller,
      ...(secrets.controllerSecret ? { token: secrets.controllerSecret } : {}),
    }),
    pool: new PolicyPool(config.rollout, {
      ...urls,
      ...(secrets.policyApiKey ? { apiKey: secrets.policyApiKey } : {}),
      ...(versionSync ? { versionSync } : {}),
    }),
    codec: await newestCodec(transport.store("checkpoints"), undefined, signal),
  };
}
