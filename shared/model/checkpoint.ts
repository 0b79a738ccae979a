import { z } from "zod";
import { ModelConfig } from "../config/policy.ts";
import { ValidationError } from "../errors.ts";
import {
  CHECKPOINT_FILES,
  CHECKPOINT_PREFIX,
  CHECKPOINT_SCHEMA_VERSION,
  CheckpointError,
  CheckpointManifest,
  HF_METADATA_FILE,
  listVersions,
  manifestKey,
  OPTIMIZER_FILE,
  readManifest,
  sha256,
  versionPrefix,
} from "../protocol/checkpoints.ts";
import type { ObjectStore } from "../transport/types.ts";
import { decodeSafetensors, encodeSafetensors, type NamedTensor } from "./safetensors.ts";
import { type OptimizerOptions, parameterShapes, TransformerPolicy } from "./transformer.ts";

/**
 * Saving and loading a policy's weights in the checkpoint store. The layout (prefixes, manifest,
 * newest version) lives in shared/protocol/checkpoints.ts, which loads no TF.js.
 */

function bytesOf(body: Uint8Array | string): Uint8Array {
  return typeof body === "string" ? Buffer.from(body, "utf8") : body;
}

/** What to record with a saved version. */
export interface SaveCheckpointOptions {
  version: number;
  step: number;
  parent: number | null;
  metrics?: Record<string, number>;
  /** The tokenizer.json text (Hugging Face format) the policy's token ids refer to. */
  tokenizerJson: string;
  /**
   * Also write the Adam moments (optimizer.safetensors, ~2x the weights) so a trainer resuming from
   * this version continues the same update rule. @default false - a resumed trainer restarts Adam's moments
   */
  optimizerState?: boolean;
  /** Contents of hf.json (see shared/model/hf), carried from an import to an export. */
  hfMetadataJson?: string;
}

/**
 * Writes policies/v{N}/ config.json, tokenizer.json and weights.safetensors, then the manifest with
 * putIfAbsent, so readers never see a partial version and a published version is never overwritten.
 * @example await saveCheckpoint(store, policy, { version: 3, step: 30, parent: 2, tokenizerJson })
 */
export async function saveCheckpoint(
  store: ObjectStore,
  policy: TransformerPolicy,
  options: SaveCheckpointOptions,
): Promise<CheckpointManifest> {
  const { version, step, parent } = options;
  if (!Number.isInteger(version) || version < 0)
    throw new CheckpointError(`version: ${version} is not allowed (must be an integer ≥ 0)`);
  const prefix = versionPrefix(version);
  // Check before writing: rewriting the files of a published version would corrupt it.
  if (await store.head(manifestKey(version)))
    throw new CheckpointError(`version ${version} already exists (${manifestKey(version)})`);
  const tensors = new Map<string, NamedTensor>();
  for (const [name, data] of policy.values()) tensors.set(name, { shape: policy.params.get(name)!.shape, data });
  const bodies: Record<(typeof CHECKPOINT_FILES)[number], Uint8Array> = {
    "config.json": bytesOf(JSON.stringify(policy.config, null, 2)),
    "tokenizer.json": bytesOf(options.tokenizerJson),
    "weights.safetensors": encodeSafetensors(tensors, { format: "agentrl-ts", layout: "x@W [in,out]" }),
  };
  const files: CheckpointManifest["files"] = [];
  for (const name of CHECKPOINT_FILES) {
    await store.put(`${prefix}${name}`, bodies[name]);
    files.push({ name, size: bodies[name].length, sha256: sha256(bodies[name]) });
  }
  const state = options.optimizerState ? policy.optimizerState() : undefined;
  if (state) {
    const moments = new Map<string, NamedTensor>();
    for (const [name, variable] of policy.params) {
      moments.set(`m.${name}`, { shape: variable.shape, data: state.m.get(name)! });
      moments.set(`v.${name}`, { shape: variable.shape, data: state.v.get(name)! });
    }
    const body = encodeSafetensors(moments, { t: String(state.t) });
    await store.put(`${prefix}${OPTIMIZER_FILE}`, body);
    files.push({ name: OPTIMIZER_FILE, size: body.length, sha256: sha256(body) });
  }
  if (options.hfMetadataJson !== undefined) {
    const body = bytesOf(options.hfMetadataJson);
    await store.put(`${prefix}${HF_METADATA_FILE}`, body);
    files.push({ name: HF_METADATA_FILE, size: body.length, sha256: sha256(body) });
  }
  const manifest = CheckpointManifest.parse({
    schemaVersion: CHECKPOINT_SCHEMA_VERSION,
    version,
    step,
    parent,
    metrics: options.metrics ?? {},
    createdAt: new Date().toISOString(),
    files,
  });
  if (!(await store.putIfAbsent(manifestKey(version), JSON.stringify(manifest, null, 2))))
    throw new CheckpointError(`version ${version} was published by another writer while this one was saving`);
  return manifest;
}

/** A loaded version. */
export interface LoadedCheckpoint {
  policy: TransformerPolicy;
  manifest: CheckpointManifest;
  config: ModelConfig;
  tokenizerJson: string;
  /** Newer versions passed over by `newest`, with why (torn, invalid manifest, checksum mismatch). */
  skipped: Array<{ version: number; reason: string }>;
}

/** Options for loadCheckpoint. */
export interface LoadCheckpointOptions {
  /** Load as a trainable policy (variables trainable; Adam moments restored when the version has them). @default false */
  trainable?: boolean;
  optimizer?: Partial<OptimizerOptions>;
}

async function loadVersion(
  store: ObjectStore,
  version: number,
  options: LoadCheckpointOptions,
): Promise<Omit<LoadedCheckpoint, "skipped">> {
  const manifest = await readManifest(store, version);
  const prefix = versionPrefix(version);
  const bodies = new Map<string, Uint8Array>();
  for (const name of CHECKPOINT_FILES) {
    const entry = manifest.files.find((f) => f.name === name);
    if (!entry) throw new CheckpointError(`version ${version}: manifest lists no ${name}`);
    const body = await store.get(`${prefix}${name}`);
    if (!body) throw new CheckpointError(`version ${version}: ${name} is missing (torn version)`);
    if (body.length !== entry.size || sha256(body) !== entry.sha256)
      throw new CheckpointError(`version ${version}: ${name} does not match its manifest size/sha256 (torn version)`);
    bodies.set(name, body);
  }
  const configText = Buffer.from(bodies.get("config.json")!).toString("utf8");
  let config: ModelConfig;
  try {
    config = ModelConfig.parse(JSON.parse(configText));
  } catch (error) {
    const detail =
      error instanceof z.ZodError
        ? error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")
        : (error as Error).message;
    throw new CheckpointError(`version ${version}: invalid config.json: ${detail}`);
  }
  let values: Map<string, Float32Array>;
  try {
    const { tensors } = decodeSafetensors(bodies.get("weights.safetensors")!);
    values = new Map();
    for (const { name, shape } of parameterShapes(config)) {
      const t = tensors.get(name);
      if (!t) throw new CheckpointError(`version ${version}: weights lack ${name}`);
      if (t.shape.join(",") !== shape.join(","))
        throw new CheckpointError(`version ${version}: ${name} has shape [${t.shape}], config needs [${shape}]`);
      values.set(name, t.data);
    }
  } catch (error) {
    if (error instanceof CheckpointError) throw error;
    throw new CheckpointError(`version ${version}: weights.safetensors: ${(error as Error).message}`, { cause: error });
  }
  const policy = new TransformerPolicy(config, values, version, {
    trainable: options.trainable ?? false,
    optimizer: options.optimizer,
  });
  policy.step = manifest.step;
  const optimizerEntry = manifest.files.find((f) => f.name === OPTIMIZER_FILE);
  if (policy.trainable && optimizerEntry) {
    try {
      const body = await store.get(`${prefix}${OPTIMIZER_FILE}`);
      if (!body) throw new CheckpointError(`version ${version}: ${OPTIMIZER_FILE} is missing (torn version)`);
      if (body.length !== optimizerEntry.size || sha256(body) !== optimizerEntry.sha256)
        throw new CheckpointError(
          `version ${version}: ${OPTIMIZER_FILE} does not match its manifest size/sha256 (torn version)`,
        );
      const { tensors, metadata } = decodeSafetensors(body);
      const pick = (prefixName: string) =>
        new Map(
          [...policy.params.keys()].map((n) => [n, tensors.get(`${prefixName}.${n}`)?.data ?? new Float32Array(0)]),
        );
      policy.setOptimizerState({ t: Number(metadata.t), m: pick("m"), v: pick("v") });
    } catch (error) {
      policy.dispose();
      if (error instanceof CheckpointError) throw error;
      throw new CheckpointError(`version ${version}: ${OPTIMIZER_FILE}: ${(error as Error).message}`, { cause: error });
    }
  }
  return { policy, manifest, config, tokenizerJson: Buffer.from(bodies.get("tokenizer.json")!).toString("utf8") };
}

/**
 * Loads one version, or the newest complete one (torn or invalid newer versions are skipped and
 * reported in `skipped`). Call `initBackend` first.
 * @example const { policy, manifest } = await loadCheckpoint(store, "newest");
 */
export async function loadCheckpoint(
  store: ObjectStore,
  which: number | "newest",
  options: LoadCheckpointOptions = {},
): Promise<LoadedCheckpoint> {
  if (which !== "newest") {
    if (!Number.isInteger(which) || which < 0)
      throw new ValidationError("checkpoint version", [
        { path: "", message: `${which} is not "newest" or an integer ≥ 0` },
      ]);
    return { ...(await loadVersion(store, which, options)), skipped: [] };
  }
  const skipped: Array<{ version: number; reason: string }> = [];
  for (const version of await listVersions(store)) {
    try {
      return { ...(await loadVersion(store, version, options)), skipped };
    } catch (error) {
      if (!(error instanceof CheckpointError)) throw error;
      skipped.push({ version, reason: error.message });
    }
  }
  throw new CheckpointError(
    `no loadable checkpoint under ${CHECKPOINT_PREFIX}${skipped.length ? `: ${skipped.map((s) => s.reason).join("; ")}` : " (the store has none)"}`,
  );
}
