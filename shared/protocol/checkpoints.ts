/**
 * The checkpoint store's layout, without the model: version prefixes (`policies/vN/`), the
 * manifest that makes a version visible, ledger keys, finding the newest complete version and
 * copying a version between stores. TF-free, so the CPU roles (feeder, rollout worker) read
 * manifests and tokenizers without loading TF.js; shared/model/checkpoint.ts adds saving and
 * loading weights on top.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { AgentRlError } from "../errors.ts";
import type { ObjectStore } from "../transport/types.ts";

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

/** Hex SHA-256 of a file body, as the manifest records it. */
export function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Key of a version's manifest (written last: the version exists exactly when this key does). */
export function manifestKey(version: number): string {
  return `${versionPrefix(version)}manifest.json`;
}

/** Key of the trainer's ledger inside a version (written before the manifest). */
export function ledgerKey(version: number): string {
  return `${versionPrefix(version)}ledger.json`;
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
  const key = manifestKey(version);
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

/** What copying a version did: `copied`, or `present` when the target already held that version (nothing written). */
export type CopyOutcome = "copied" | "present";

/**
 * Copies policies/v{version}/ between stores, manifest last with create-if-absent, so the copy
 * becomes visible only when complete and a published version is never overwritten. Idempotent:
 * when the target already has the version's manifest it writes nothing and says `present`. Checks
 * every file against the source manifest first, so a torn source is never published.
 * @example await copyVersion(new LocalObjectStore("trainer-image/base-policy"), checkpoints, 0)
 */
export async function copyVersion(from: ObjectStore, to: ObjectStore, version: number): Promise<CopyOutcome> {
  const manifest = await readManifest(from, version);
  if ((await to.head(manifestKey(version))) !== undefined) return "present";
  const prefix = versionPrefix(version);
  const bodies = new Map<string, Uint8Array>();
  for (const entry of manifest.files) {
    const body = await from.get(`${prefix}${entry.name}`);
    if (!body || body.length !== entry.size || sha256(body) !== entry.sha256)
      throw new CheckpointError(`version ${version}: ${entry.name} is missing or does not match its manifest`);
    bodies.set(entry.name, body);
  }
  for (const [name, body] of bodies) await to.put(`${prefix}${name}`, body);
  const ledger = await from.get(ledgerKey(version));
  if (ledger) await to.put(ledgerKey(version), ledger);
  const manifestBody = await from.get(manifestKey(version));
  if (!manifestBody) throw new CheckpointError(`version ${version}: manifest vanished while copying`);
  return (await to.putIfAbsent(manifestKey(version), manifestBody)) ? "copied" : "present";
}
