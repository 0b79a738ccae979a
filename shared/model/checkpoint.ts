import { createHash } from "node:crypto";
import { z } from "zod";
import { ModelConfig } from "../config/policy.ts";
import { AgentRlError, ValidationError } from "../errors.ts";
import type { ObjectStore } from "../transport/types.ts";
import { decodeSafetensors, encodeSafetensors, type NamedTensor } from "./safetensors.ts";
import { type OptimizerOptions, parameterShapes, TransformerPolicy } from "./transformer.ts";

/** Raised when a checkpoint cannot be written or read; `reason` is the one-line why. */
export class CheckpointError extends AgentRlError {
  override readonly name = "CheckpointError";
}

export const CHECKPOINT_SCHEMA_VERSION = 1;
export const CHECKPOINT_PREFIX = "policies/";

/** Files of one version, besides the manifest that lists them. */
export const CHECKPOINT_FILES = ["config.json", "tokenizer.json", "weights.safetensors"] as const;
/** Optional file: Adam moments (`m.<param>`, `v.<param>`, metadata `t`), written when asked for. */
export const OPTIMIZER_FILE = "optimizer.safetensors";
/** Optional file: what a Hugging Face import knew (architecture, dtype, config, tokenizer config), for export. */
export const HF_METADATA_FILE = "hf.json";

/** The manifest written last under policies/v{N}/: a version exists exactly when its manifest does. */
export const CheckpointManifest = z
  .object({
    schemaVersion: z.literal(CHECKPOINT_SCHEMA_VERSION),
    version: z.number().int().min(0),
    step: z.number().int().min(0),
    /** Version this one was trained from; null for a fresh init. */
    parent: z.number().int().min(0).nullable(),
    metrics: z.record(z.string(), z.number()),
    createdAt: z.iso.datetime(),
    files: z.array(
      z
        .object({
          name: z.enum([...CHECKPOINT_FILES, OPTIMIZER_FILE, HF_METADATA_FILE]),
          size: z.number().int().min(0),
          sha256: z.string().regex(/^[0-9a-f]{64}$/),
        })
        .strict(),
    ),
  })
  .strict();
export type CheckpointManifest = z.infer<typeof CheckpointManifest>;

/** Key prefix of one version. */
export function versionPrefix(version: number): string {
  return `${CHECKPOINT_PREFIX}v${version}/`;
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

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
  const manifestKey = `${prefix}manifest.json`;
  // Check before writing: rewriting the files of a published version would corrupt it.
  if (await store.head(manifestKey)) throw new CheckpointError(`version ${version} already exists (${manifestKey})`);
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
  if (!(await store.putIfAbsent(manifestKey, JSON.stringify(manifest, null, 2))))
    throw new CheckpointError(`version ${version} was published by another writer while this one was saving`);
  return manifest;
}

/** Version numbers that have a manifest key, newest first (manifests not yet validated). */
export async function listVersions(store: ObjectStore): Promise<number[]> {
  const versions: number[] = [];
  for (const info of await store.list(CHECKPOINT_PREFIX)) {
    const match = /^policies\/v(\d+)\/manifest\.json$/.exec(info.key);
    if (match) versions.push(Number(match[1]));
  }
  return versions.sort((a, b) => b - a);
}

/** Reads and validates one version's manifest; throws CheckpointError with the reason. */
export async function readManifest(store: ObjectStore, version: number): Promise<CheckpointManifest> {
  const key = `${versionPrefix(version)}manifest.json`;
  const text = await store.getText(key);
  if (text === undefined)
    throw new CheckpointError(`version ${version}: no manifest (${key}); not published or incomplete`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new CheckpointError(`version ${version}: manifest is not valid JSON (${(error as Error).message})`);
  }
  const parsed = CheckpointManifest.safeParse(raw);
  if (!parsed.success)
    throw new CheckpointError(
      `version ${version}: invalid manifest: ${parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`,
    );
  if (parsed.data.version !== version)
    throw new CheckpointError(`version ${version}: manifest says version ${parsed.data.version}`);
  return parsed.data;
}

/** The newest version whose manifest is valid, or undefined when none is. Cheap: one list and one get per candidate. */
export async function newestVersion(store: ObjectStore): Promise<number | undefined> {
  for (const version of await listVersions(store)) {
    try {
      await readManifest(store, version);
      return version;
    } catch (error) {
      if (!(error instanceof CheckpointError)) throw error;
    }
  }
  return undefined;
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
