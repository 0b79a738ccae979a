import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { type Command, InvalidArgumentError } from "commander";
import { ValidationError } from "../../shared/errors.ts";
import type { FloatDtype } from "../../shared/model/safetensors.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";

interface StoreOptions {
  store?: boolean;
  config?: string;
  set?: string[];
}

/** The local checkpoint folder `dir`, or (with --store) the experiment's checkpoint store. */
async function openStore(
  dir: string | undefined,
  flag: string,
  options: StoreOptions,
): Promise<{ store: ObjectStore; close: () => Promise<void> }> {
  if (Boolean(dir) === Boolean(options.store))
    throw new ValidationError("policy options", [
      { path: `${flag}/--store`, message: `give exactly one: ${flag} DIR or --store` },
    ]);
  const { LocalObjectStore } = await import("../../shared/transport/local.ts");
  if (dir && flag === "--from") assertCheckpointFolder(dir, flag);
  if (dir) {
    const folder = new LocalObjectStore(dir);
    return { store: folder, close: () => folder.removeEmptyTempDir() };
  }
  const config = await configFromOptions(options);
  const { createTransport } = await import("../../shared/transport/index.ts");
  const transport = await createTransport(config.transport);
  return { store: transport.store("checkpoints"), close: () => transport.close() };
}

/**
 * `agentrl policy import-hf` and `agentrl policy export-hf`: Hugging Face transformers folders
 * (Qwen2, Llama) into and out of the checkpoint format (shared/model/hf).
 */
export function registerHfCommands(policy: Command): void {
  withConfigOptions(
    policy
      .command("import-hf <hfDir>")
      .description("import a transformers Qwen2/Llama folder (safetensors, tokenizer, chat template) as a checkpoint")
      .option("--out <dir>", "write policies/v<N>/ under this folder")
      .option("--store", "write into the experiment's checkpoint store")
      .option("--version <n>", "version number to write", versionOption, 0),
  ).action(async (hfDir: string, options: StoreOptions & { out?: string; version: number }) => {
    if (!existsSync(hfDir) || !statSync(hfDir).isDirectory())
      throw new ValidationError("policy options", [
        {
          path: "<hfDir>",
          message: `${hfDir} does not exist or is not a folder; give a Hugging Face model folder (config.json, *.safetensors, tokenizer.json)`,
        },
      ]);
    const { store, close } = await openStore(options.out, "--out", options);
    try {
      const { initBackend } = await import("../../shared/model/backend.ts");
      await initBackend("auto");
      const { importHfFolder } = await import("../../shared/model/hf/index.ts");
      const manifest = await importHfFolder(hfDir, store, { version: options.version });
      process.stdout.write(
        `${JSON.stringify({ event: "imported", from: hfDir, version: manifest.version, files: manifest.files.map((f) => f.name) })}\n`,
      );
    } finally {
      await close();
    }
  });

  withConfigOptions(
    policy
      .command("export-hf")
      .description("write a checkpoint version as a transformers folder (loads in transformers, vLLM, SGLang)")
      .option("--from <dir>", "checkpoint folder holding policies/v<N>/")
      .option("--store", "read from the experiment's checkpoint store")
      .requiredOption("--out <hfDir>", "folder to write config.json, model.safetensors and tokenizer files to")
      .option("--version <n>", 'version to export: a number or "newest"', versionOrNewest, "newest" as const)
      .option(
        "--dtype <dtype>",
        "weight element type: F32, BF16 or F16 (default: the imported folder's, else F32)",
        dtypeOption,
      ),
  ).action(
    async (options: StoreOptions & { from?: string; out: string; version: number | "newest"; dtype?: FloatDtype }) => {
      const { store, close } = await openStore(options.from, "--from", options);
      try {
        const { initBackend } = await import("../../shared/model/backend.ts");
        await initBackend("auto");
        const { exportHfFolder } = await import("../../shared/model/hf/index.ts");
        const result = await exportHfFolder(store, options.version, options.out, { dtype: options.dtype });
        process.stdout.write(`${JSON.stringify({ event: "exported", out: options.out, ...result })}\n`);
      } finally {
        await close();
      }
    },
  );
}

/** A checkpoint folder read from: it must exist and hold policies/v<N>/; the message names the path. */
export function assertCheckpointFolder(dir: string, flag: string): void {
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    throw new ValidationError("policy options", [
      {
        path: flag,
        message: `${dir} does not exist or is not a folder; give a checkpoint folder holding policies/v<N>/`,
      },
    ]);
  const policies = join(dir, "policies");
  const versions = existsSync(policies) ? readdirSync(policies).filter((name) => /^v\d+$/.test(name)) : [];
  if (versions.length === 0)
    throw new ValidationError("policy options", [
      { path: flag, message: `${dir} holds no checkpoint: no policies/v<N>/ folder in it` },
    ]);
}

function versionOption(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n))
    throw new InvalidArgumentError(`--version must be an integer >= 0, got "${value}"`);
  return n;
}

function versionOrNewest(value: string): number | "newest" {
  if (value === "newest") return value;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n))
    throw new InvalidArgumentError(`--version must be "newest" or an integer >= 0, got "${value}"`);
  return n;
}

function dtypeOption(value: string): FloatDtype {
  if (value === "F32" || value === "BF16" || value === "F16") return value;
  throw new InvalidArgumentError(`--dtype must be F32, BF16 or F16, got "${value}"`);
}
