import { mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import type { PolicyConfig, SyncEngineConfig } from "../../shared/config/policy.ts";
import type { Logger } from "../../shared/log.ts";
import { exportHfFolder } from "../../shared/model/hf/index.ts";
import { engineIdOf, withEngineRecord } from "../../shared/policy/engine-sync.ts";
import { reloadVllmWeights, updateWeightsFromDisk, WeightSyncError } from "../../shared/policy/weight-sync.ts";
import { versionPrefix } from "../../shared/protocol/checkpoints.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";

/** Key prefix of a version's Hugging Face folder in the checkpoint store. */
export function hfPrefix(version: number): string {
  return `${versionPrefix(version)}hf/`;
}

/** What one engine answered to a version's weight sync. */
export interface EngineSyncResult {
  /** Its sync record is engines/<id>.json. */
  readonly id: string;
  readonly url: string;
  readonly dialect: SyncEngineConfig["dialect"];
  /** True once the engine confirmed it serves the version. */
  readonly loaded: boolean;
  readonly error?: string;
}

/** What publishing a version as a Hugging Face folder did. */
export interface HfPublishResult {
  /** Keys written under policies/vN/hf/. */
  readonly keys: readonly string[];
  /** The folder on this machine, when the checkpoint store is a local folder. */
  readonly localDir?: string;
  readonly engines: readonly EngineSyncResult[];
}

/** The trainer's `policy.exportHf` step: export a published version and sync the engines to it. */
export interface HfPublisher {
  publish(checkpoints: ObjectStore, version: number): Promise<HfPublishResult>;
  /**
   * At trainer start: syncs every engine to `version` (the one training continues from), exporting
   * it first when policies/vN/hf/ is missing. Until an engine's record says ready, a pool with
   * `rollout.versionSource: sync` cannot use it, and a trainer restarted during a load would
   * otherwise leave its record at `loading` until the next publish, which needs that pool's rollouts.
   */
  resync(checkpoints: ObjectStore, version: number): Promise<HfPublishResult>;
}

export interface HfPublisherOptions {
  readonly log: Logger;
  /** Where `apiKeyEnv` names are looked up. @default process.env */
  readonly env?: Readonly<Record<string, string | undefined>>;
  readonly fetchImpl?: typeof fetch;
}

/**
 * Writes checkpoint `version` as a transformers folder under policies/vN/hf/ (after its manifest:
 * the version itself is already complete) and returns the keys written.
 */
export async function exportHfVersion(
  checkpoints: ObjectStore,
  version: number,
): Promise<{ keys: string[]; localDir?: string }> {
  const scratch = await mkdtemp(join(tmpdir(), "agentrl-hf-export-"));
  try {
    const { files } = await exportHfFolder(checkpoints, version, scratch);
    const keys: string[] = [];
    // config.json last: an engine (or a person) that sees it finds the weights already there.
    for (const name of [...files.filter((f) => f !== "config.json"), "config.json"]) {
      const key = `${hfPrefix(version)}${name}`;
      await checkpoints.put(key, await readFile(join(scratch, name)));
      keys.push(key);
    }
    return { keys, ...localHfDir(checkpoints, version) };
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** The version's Hugging Face folder on this machine, when the checkpoint store is a local folder. */
function localHfDir(checkpoints: ObjectStore, version: number): { localDir?: string } {
  return checkpoints instanceof LocalObjectStore
    ? { localDir: join(checkpoints.dir, "policies", `v${version}`, "hf") }
    : {};
}

/** Replaces the files of the folder a vLLM engine serves with the version's, each by an atomic rename. */
async function replaceModelDir(checkpoints: ObjectStore, keys: readonly string[], modelDir: string): Promise<void> {
  await mkdir(modelDir, { recursive: true });
  for (const key of keys) {
    const body = await checkpoints.get(key);
    if (body === undefined) throw new WeightSyncError(`${key} vanished from the checkpoint store`);
    const name = posix.basename(key);
    const staging = join(modelDir, `.${name}.agentrl-partial`);
    await writeFile(staging, body);
    await rename(staging, join(modelDir, name));
  }
  // Shards of an earlier, differently sharded folder would be read too: drop safetensors the version lacks.
  const names = new Set(keys.map((k) => posix.basename(k)));
  for (const entry of await readdir(modelDir))
    if (entry.endsWith(".safetensors") && !names.has(entry)) await rm(join(modelDir, entry), { force: true });
}

async function syncEngine(
  engine: SyncEngineConfig,
  checkpoints: ObjectStore,
  version: number,
  exported: { keys: readonly string[]; localDir?: string },
  options: HfPublisherOptions,
): Promise<void> {
  let apiKey: string | undefined;
  if (engine.apiKeyEnv !== undefined) {
    apiKey = (options.env ?? process.env)[engine.apiKeyEnv];
    if (!apiKey) throw new WeightSyncError(`apiKeyEnv ${engine.apiKeyEnv} is not set`);
  }
  const call = {
    ...(apiKey === undefined ? {} : { apiKey }),
    ...(options.fetchImpl ? { fetchImpl: options.fetchImpl } : {}),
  };
  const modelPath =
    engine.checkpointMount !== undefined ? posix.join(engine.checkpointMount, hfPrefix(version)) : exported.localDir;
  if (engine.dialect !== "vllm" && modelPath === undefined)
    throw new WeightSyncError(
      "the checkpoint store is not a folder on this machine: set checkpointMount to where the engine sees it",
    );
  // engines/<id>.json says `loading` before the engine is touched (vLLM's served folder included)
  // and `ready` only after it confirmed: rollout pools with versionSource sync label answers by it.
  await withEngineRecord(checkpoints, engineIdOf(engine), version, async () => {
    if (engine.dialect === "vllm") {
      await replaceModelDir(checkpoints, exported.keys, engine.modelDir as string);
      await reloadVllmWeights(engine.url, version, call);
    } else await updateWeightsFromDisk(engine.url, { modelPath: modelPath as string, version }, call);
  });
}

/**
 * `policy.exportHf` + `policy.syncEngines`: at each publish, the version is written under
 * policies/vN/hf/ and every engine is told to load it (SGLang's update_weights_from_disk, which
 * this project's policy server also answers, or vLLM's reload). Each load is bracketed by the
 * engine's sync record (engines/<id>.json: `loading`, then `ready` once confirmed). An engine
 * that fails keeps reporting its old version where it reports one (our server's header) and its
 * record stays `loading`, so no answer is mislabelled; the failure is logged and returned, never
 * thrown: training goes on.
 * @example await hfPublisher(config.policy, { log }).publish(checkpoints, 7)
 */
export function hfPublisher(policy: Pick<PolicyConfig, "syncEngines">, options: HfPublisherOptions): HfPublisher {
  const { log } = options;
  const syncAll = async (
    checkpoints: ObjectStore,
    version: number,
    exported: { keys: string[]; localDir?: string },
  ): Promise<HfPublishResult> => {
    const engines = await Promise.all(
      policy.syncEngines.map(async (engine): Promise<EngineSyncResult> => {
        const id = engineIdOf(engine);
        try {
          await syncEngine(engine, checkpoints, version, exported, options);
          log.info({ version, engine: engine.url, id, dialect: engine.dialect }, `engine loaded policy v${version}`);
          return { id, url: engine.url, dialect: engine.dialect, loaded: true };
        } catch (error) {
          const message = (error as Error).message;
          log.warn(
            { version, engine: engine.url, id, dialect: engine.dialect, err: message },
            `engine did not load policy v${version}; a pool reading its sync record waits for a later load`,
          );
          return { id, url: engine.url, dialect: engine.dialect, loaded: false, error: message };
        }
      }),
    );
    return { ...exported, engines };
  };
  return {
    async publish(checkpoints, version) {
      const exported = await exportHfVersion(checkpoints, version);
      log.info({ version, files: exported.keys.length }, `policy v${version} exported to ${hfPrefix(version)}`);
      return syncAll(checkpoints, version, exported);
    },
    async resync(checkpoints, version) {
      const listed = (await checkpoints.list(hfPrefix(version))).map((o) => o.key);
      // config.json is written last: without it the export is missing or was cut short.
      const exported = listed.includes(`${hfPrefix(version)}config.json`)
        ? { keys: listed, ...localHfDir(checkpoints, version) }
        : await exportHfVersion(checkpoints, version);
      return syncAll(checkpoints, version, exported);
    },
  };
}
