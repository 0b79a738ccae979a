import { z } from "zod";
import { AgentRlError } from "../errors.ts";
import {
  type CheckpointManifest,
  HF_METADATA_FILE,
  newestVersion,
  readManifest,
  versionPrefix,
} from "../protocol/checkpoints.ts";
import type { ObjectStore } from "../transport/types.ts";
import { ChatCodec } from "./codec.ts";

/** A checkpoint's tokenizer or chat template cannot be read. */
export class CheckpointCodecError extends AgentRlError {
  override readonly name = "CheckpointCodecError";
}

/** No published version appeared in the checkpoint store in time. */
export class NoPolicyVersionError extends AgentRlError {
  override readonly name = "NoPolicyVersionError";
}

/**
 * The chat codec of the newest published policy, waiting up to `timeoutMs` for a first version:
 * what the policy servers render with, so the rollout workers and the gateway tokenize as they do.
 * @example const codec = await newestCodec(transport.store("checkpoints"), 60_000, signal)
 */
export async function newestCodec(store: ObjectStore, timeoutMs = 60_000, signal?: AbortSignal): Promise<ChatCodec> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const version = await newestVersion(store);
    if (version !== undefined) return codecOfVersion(store, await readManifest(store, version));
    if (Date.now() > deadline || signal?.aborted)
      throw new NoPolicyVersionError(
        `no policy version with a tokenizer in the checkpoint store after ${timeoutMs} ms`,
      );
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** The part of hf.json (written by a Hugging Face import) that the chat format needs. */
const HfChatMetadata = z
  .object({
    tokenizerConfig: z
      .object({ chat_template: z.string().min(1).optional() })
      .passthrough()
      .nullable(),
  })
  .passthrough();

function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new CheckpointCodecError(`${what} is not valid JSON (${(error as Error).message})`);
  }
}

/**
 * The chat codec of one published version: its tokenizer.json, rendered with the model's own
 * chat template when the version was imported from a Hugging Face folder (hf.json's
 * tokenizer_config.json), else this project's template. The policy server and the rollout
 * workers both load it here, so both sides render and tokenize a conversation the same way.
 * @example const codec = await codecOfVersion(store, await readManifest(store, 3))
 */
export async function codecOfVersion(store: ObjectStore, manifest: CheckpointManifest): Promise<ChatCodec> {
  const prefix = versionPrefix(manifest.version);
  const tokenizerText = await store.getText(`${prefix}tokenizer.json`);
  if (tokenizerText === undefined)
    throw new CheckpointCodecError(`version ${manifest.version}: ${prefix}tokenizer.json is missing`);
  const tokenizer = parseJson(tokenizerText, `${prefix}tokenizer.json`);
  if (!manifest.files.some((f) => f.name === HF_METADATA_FILE)) return ChatCodec.fromTokenizerJson(tokenizer);
  const metadataText = await store.getText(`${prefix}${HF_METADATA_FILE}`);
  if (metadataText === undefined)
    throw new CheckpointCodecError(
      `version ${manifest.version}: the manifest lists ${HF_METADATA_FILE} but it is missing`,
    );
  const metadata = HfChatMetadata.safeParse(parseJson(metadataText, `${prefix}${HF_METADATA_FILE}`));
  if (!metadata.success)
    throw new CheckpointCodecError(
      `${prefix}${HF_METADATA_FILE}: tokenizerConfig must be an object with a string chat_template, or null`,
    );
  const tokenizerConfig = metadata.data.tokenizerConfig;
  return tokenizerConfig?.chat_template === undefined
    ? ChatCodec.fromTokenizerJson(tokenizer)
    : ChatCodec.fromModelFiles(tokenizer, tokenizerConfig);
}
