import { existsSync } from "node:fs";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { CHAT_TEMPLATE, END_OF_TEXT, END_OF_TURN } from "../../chat/index.ts";
import type { ModelConfig } from "../../config/policy.ts";
import { issuesOf } from "../../errors.ts";
import { type CheckpointManifest, HF_METADATA_FILE, versionPrefix } from "../../protocol/checkpoints.ts";
import { MemoryObjectStore } from "../../transport/memory.ts";
import type { ObjectStore } from "../../transport/types.ts";
import { loadCheckpoint, saveCheckpoint } from "../checkpoint.ts";
import { decodeSafetensors, encodeSafetensors, FloatDtype, type NamedTensor } from "../safetensors.ts";
import { TransformerPolicy } from "../transformer.ts";
import {
  architectureFor,
  HF_ARCHITECTURES,
  type HfArchitecture,
  HfFormatError,
  hfConfigFor,
  modelConfigFromHf,
} from "./config.ts";
import { hfTensorsFromValues, valuesFromHf } from "./weights.ts";

/** Single-file and sharded weight layouts of a transformers folder. */
export const SAFETENSORS_FILE = "model.safetensors";
export const SAFETENSORS_INDEX_FILE = "model.safetensors.index.json";

const JsonObject = z.record(z.string(), z.unknown());

/** hf.json in a checkpoint: what an export needs to write the folder back as it came. */
export const HfMetadata = z
  .object({
    architecture: z.enum(HF_ARCHITECTURES),
    dtype: FloatDtype,
    /** The imported config.json (fields this project does not read are written back unchanged). */
    config: JsonObject,
    tokenizerConfig: JsonObject.nullable(),
    generationConfig: JsonObject.nullable(),
  })
  .strict();
export type HfMetadata = z.infer<typeof HfMetadata>;

const ShardIndex = z.object({
  metadata: JsonObject.optional(),
  weight_map: z.record(z.string(), z.string().min(1)),
});

/** A transformers causal-LM folder read into this project's terms. */
export interface HfFolder {
  readonly config: ModelConfig;
  readonly values: Map<string, Float32Array>;
  readonly tokenizerJson: string;
  readonly metadata: HfMetadata;
}

async function readJsonFile(path: string, what: string, required: true): Promise<Record<string, unknown>>;
async function readJsonFile(path: string, what: string, required: false): Promise<Record<string, unknown> | null>;
async function readJsonFile(path: string, what: string, required: boolean): Promise<Record<string, unknown> | null> {
  if (!existsSync(path)) {
    if (required) throw new HfFormatError(`${what}: ${path} does not exist`);
    return null;
  }
  let value: unknown;
  try {
    value = JSON.parse(await readFile(path, "utf8"));
  } catch (error) {
    throw new HfFormatError(`${what}: ${path} is not valid JSON (${(error as Error).message})`);
  }
  const parsed = JsonObject.safeParse(value);
  if (!parsed.success) throw new HfFormatError(`${what}: ${path} is not a JSON object`);
  return parsed.data;
}

/** All tensors of model.safetensors or of the shards model.safetensors.index.json names. */
async function readWeights(dir: string): Promise<Map<string, NamedTensor>> {
  const indexPath = join(dir, SAFETENSORS_INDEX_FILE);
  const files: string[] = [];
  let weightMap: Record<string, string> | undefined;
  if (existsSync(indexPath)) {
    const index = ShardIndex.safeParse(await readJsonFile(indexPath, SAFETENSORS_INDEX_FILE, true));
    if (!index.success)
      throw new HfFormatError(
        `${SAFETENSORS_INDEX_FILE}: ${issuesOf(index.error)
          .map((i) => `${i.path}: ${i.message}`)
          .join("; ")}`,
      );
    weightMap = index.data.weight_map;
    files.push(...new Set(Object.values(weightMap)));
  } else if (existsSync(join(dir, SAFETENSORS_FILE))) files.push(SAFETENSORS_FILE);
  else throw new HfFormatError(`${dir} holds neither ${SAFETENSORS_FILE} nor ${SAFETENSORS_INDEX_FILE}`);
  const tensors = new Map<string, NamedTensor>();
  for (const file of files) {
    if (file.includes("/") || file.includes("\\"))
      throw new HfFormatError(`${SAFETENSORS_INDEX_FILE}: shard "${file}" must be a file name in the folder`);
    const path = join(dir, file);
    if (!existsSync(path)) throw new HfFormatError(`${file}: listed in ${SAFETENSORS_INDEX_FILE} but missing`);
    let decoded: ReturnType<typeof decodeSafetensors>;
    try {
      decoded = decodeSafetensors(await readFile(path), { dtypes: ["F32", "F16", "BF16"] });
    } catch (error) {
      throw new HfFormatError(`${file}: ${(error as Error).message}`, { cause: error });
    }
    for (const [name, tensor] of decoded.tensors) {
      if (tensors.has(name)) throw new HfFormatError(`${file}: ${name} also appears in another shard`);
      if (weightMap && weightMap[name] !== file)
        throw new HfFormatError(`${file}: holds ${name}, which ${SAFETENSORS_INDEX_FILE} maps to ${weightMap[name]}`);
      tensors.set(name, tensor);
    }
  }
  if (weightMap)
    for (const [name, file] of Object.entries(weightMap))
      if (!tensors.has(name)) throw new HfFormatError(`${file}: lacks ${name}, which ${SAFETENSORS_INDEX_FILE} lists`);
  return tensors;
}

/**
 * Reads a transformers Qwen2/Llama folder: config.json, model.safetensors (or a sharded index),
 * F32/BF16/F16 weights widened to float32, tokenizer.json, and the optional tokenizer_config.json
 * (chat template, special tokens) and generation_config.json.
 * @example const folder = await readHfFolder("models/qwen2.5-0.5b-instruct")
 */
export async function readHfFolder(dir: string): Promise<HfFolder> {
  if (!existsSync(dir)) throw new HfFormatError(`${dir} does not exist`);
  const imported = modelConfigFromHf(await readJsonFile(join(dir, "config.json"), "config.json", true));
  const values = valuesFromHf(imported.model, await readWeights(dir));
  const tokenizerPath = join(dir, "tokenizer.json");
  if (!existsSync(tokenizerPath))
    throw new HfFormatError(`tokenizer.json: ${tokenizerPath} does not exist (the policy's token ids need it)`);
  const tokenizerJson = await readFile(tokenizerPath, "utf8");
  await readJsonFile(tokenizerPath, "tokenizer.json", true);
  return {
    config: imported.model,
    values,
    tokenizerJson,
    metadata: {
      architecture: imported.architecture,
      dtype: imported.dtype,
      config: imported.raw,
      tokenizerConfig: await readJsonFile(join(dir, "tokenizer_config.json"), "tokenizer_config.json", false),
      generationConfig: await readJsonFile(join(dir, "generation_config.json"), "generation_config.json", false),
    },
  };
}

/**
 * Imports a transformers folder into `store` as checkpoint `version` (with hf.json, so an export
 * writes the same folder back). Call `initBackend` first.
 */
export async function importHfFolder(
  dir: string,
  store: ObjectStore,
  options: { version?: number } = {},
): Promise<CheckpointManifest> {
  const folder = await readHfFolder(dir);
  const policy = new TransformerPolicy(folder.config, folder.values, options.version ?? 0, { trainable: false });
  try {
    return await saveCheckpoint(store, policy, {
      version: options.version ?? 0,
      step: 0,
      parent: null,
      tokenizerJson: folder.tokenizerJson,
      hfMetadataJson: JSON.stringify(folder.metadata, null, 2),
    });
  } finally {
    policy.dispose();
  }
}

/**
 * A checkpoint store holding `dir` imported as version 0, in memory: what `policy.init` naming a
 * transformers folder serves. Call `initBackend` first.
 */
export async function hfCheckpointStore(dir: string): Promise<ObjectStore> {
  const store = new MemoryObjectStore();
  await importHfFolder(dir, store);
  return store;
}

/** An inference policy from a transformers folder, labelled `version` (what a weight sync loads). Call `initBackend` first. */
export async function loadHfPolicy(dir: string, version: number): Promise<TransformerPolicy> {
  const folder = await readHfFolder(dir);
  return new TransformerPolicy(folder.config, folder.values, version, { trainable: false });
}

/** Reads hf.json of a version when its manifest lists it. */
async function readHfMetadata(store: ObjectStore, manifest: CheckpointManifest): Promise<HfMetadata | undefined> {
  if (!manifest.files.some((f) => f.name === HF_METADATA_FILE)) return undefined;
  const text = await store.getText(`${versionPrefix(manifest.version)}${HF_METADATA_FILE}`);
  if (text === undefined) throw new HfFormatError(`version ${manifest.version}: ${HF_METADATA_FILE} is missing`);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new HfFormatError(
      `version ${manifest.version}: ${HF_METADATA_FILE} is not JSON (${(error as Error).message})`,
    );
  }
  const parsed = HfMetadata.safeParse(raw);
  if (!parsed.success)
    throw new HfFormatError(
      `version ${manifest.version}: ${HF_METADATA_FILE}: ${issuesOf(parsed.error)
        .map((i) => `${i.path}: ${i.message}`)
        .join("; ")}`,
    );
  return parsed.data;
}

/**
 * The tokenizer_config.json an imported version came with, when it names a chat template: a
 * server renders that model's conversations with it (ChatCodec.fromModelFiles).
 */
export async function modelTokenizerConfig(
  store: ObjectStore,
  manifest: CheckpointManifest,
): Promise<Record<string, unknown> | undefined> {
  const config = (await readHfMetadata(store, manifest))?.tokenizerConfig;
  return typeof config?.chat_template === "string" ? config : undefined;
}

/** Options for exportHfFolder. */
export interface ExportHfOptions {
  /** Element type of the written weights. @default the imported folder's, else F32 */
  readonly dtype?: FloatDtype;
}

/** tokenizer_config.json for a checkpoint that was not imported: this project's chat template and stop tokens. */
function defaultTokenizerConfig(model: ModelConfig): Record<string, unknown> {
  return {
    tokenizer_class: "PreTrainedTokenizerFast",
    chat_template: CHAT_TEMPLATE,
    eos_token: END_OF_TURN,
    pad_token: END_OF_TEXT,
    bos_token: null,
    model_max_length: model.contextLength,
  };
}

/** Ids of the stop tokens in a tokenizer.json (for generation_config.json). */
function stopTokenIds(tokenizerJson: string): number[] {
  const parsed = z
    .object({ added_tokens: z.array(z.object({ id: z.number(), content: z.string() })).default([]) })
    .safeParse(JSON.parse(tokenizerJson));
  if (!parsed.success) return [];
  return parsed.data.added_tokens
    .filter((t) => t.content === END_OF_TURN || t.content === END_OF_TEXT)
    .map((t) => t.id);
}

/**
 * Writes checkpoint `version` of `store` as a transformers folder `outDir`: config.json,
 * model.safetensors ([out, in] weights, transformers names, metadata format "pt"),
 * tokenizer.json, tokenizer_config.json (chat template) and generation_config.json. A version
 * imported from a folder is written back with that folder's architecture, dtype and extra fields.
 * Call `initBackend` first. Returns the files written.
 */
export async function exportHfFolder(
  store: ObjectStore,
  version: number | "newest",
  outDir: string,
  options: ExportHfOptions = {},
): Promise<{ version: number; architecture: HfArchitecture; dtype: FloatDtype; files: string[] }> {
  const loaded = await loadCheckpoint(store, version);
  try {
    const { config, manifest } = loaded;
    const metadata = await readHfMetadata(store, manifest);
    const architecture = metadata?.architecture ?? architectureFor(config);
    if ((architecture === "Qwen2ForCausalLM") !== config.qkvBias)
      throw new HfFormatError(
        `version ${manifest.version}: ${architecture} ${config.qkvBias ? "has no" : "needs"} q/k/v biases but the checkpoint ${config.qkvBias ? "has" : "has none"}`,
      );
    const dtype = options.dtype ?? metadata?.dtype ?? "F32";
    const tensors = hfTensorsFromValues(config, loaded.policy.values());
    const bodies: Array<[string, string | Uint8Array]> = [
      ["config.json", JSON.stringify(hfConfigFor(config, architecture, dtype, metadata?.config), null, 2)],
      [SAFETENSORS_FILE, encodeSafetensors(tensors, { format: "pt" }, dtype)],
      ["tokenizer.json", loaded.tokenizerJson],
      ["tokenizer_config.json", JSON.stringify(metadata?.tokenizerConfig ?? defaultTokenizerConfig(config), null, 2)],
      [
        "generation_config.json",
        JSON.stringify(metadata?.generationConfig ?? { eos_token_id: stopTokenIds(loaded.tokenizerJson) }, null, 2),
      ],
    ];
    await mkdir(outDir, { recursive: true });
    for (const [name, body] of bodies) await writeFile(join(outDir, name), body);
    return { version: manifest.version, architecture, dtype, files: bodies.map(([name]) => name) };
  } finally {
    loaded.policy.dispose();
  }
}
