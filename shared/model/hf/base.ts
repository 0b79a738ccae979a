import { existsSync } from "node:fs";
import { join } from "node:path";
import type { PolicyConfig } from "../../config/policy.ts";
import type { ObjectStore } from "../../transport/types.ts";

/** True when `dir` looks like a transformers model folder (config.json, and no policies/ of a checkpoint folder). */
export function isHfFolder(dir: string): boolean {
  return existsSync(join(dir, "config.json")) && !existsSync(join(dir, "policies"));
}

/**
 * The store behind a folder `policy.base` or `policy.init` names: a checkpoint folder as it is, or
 * a Hugging Face folder imported in memory as version 0 (with hf.json: its chat template and
 * architecture travel on). Imports are lazy (TF.js only in the second case), so the CLI modules
 * that check a folder with `isHfFolder` stay light.
 * @example await copyVersion(await checkpointFolderStore(config.policy.base, config.policy.backend), store, 0)
 */
export async function checkpointFolderStore(dir: string, backend: PolicyConfig["backend"]): Promise<ObjectStore> {
  if (!isHfFolder(dir)) {
    const { LocalObjectStore } = await import("../../transport/local.ts");
    return new LocalObjectStore(dir);
  }
  const [{ initBackend }, { hfCheckpointStore }] = await Promise.all([import("../backend.ts"), import("./folder.ts")]);
  await initBackend(backend);
  return hfCheckpointStore(dir);
}
