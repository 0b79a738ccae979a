import { createHash } from "node:crypto";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { AgentRlError } from "../errors.ts";

/**
 * AgentBench's published task data (DBBench, OS interaction), pinned to one upstream commit.
 * The files live outside the repository, in a folder with AgentBench's own layout
 * (`data/dbbench/standard.jsonl`, ...), so a clone of AgentBench works as it is.
 */

/** The upstream commit whose files `SHA256SUMS` lists (THUDM/AgentBench, 2025-11-17). */
export const AGENTBENCH_COMMIT = "578c5e9f706fc2dd96188ca6c8cf9095ca0c6528";
/** Where `agentrl data fetch agentbench` downloads from; `<base>/<commit>/data/<path>`. */
export const AGENTBENCH_DEFAULT_BASE_URL = "https://raw.githubusercontent.com/THUDM/AgentBench";
/** The environment variable naming the data folder; wins over the config's `tasks.agentbench.dir`. */
export const AGENTBENCH_DIR_ENV = "AGENTRL_AGENTBENCH_DIR";
/** Default target of `agentrl data fetch agentbench` (relative to the working directory). */
export const AGENTBENCH_DEFAULT_DIR = ".agentrl/agentbench";

const MANIFEST_PATH = join(dirname(fileURLToPath(import.meta.url)), "SHA256SUMS");

/** One file of the pinned data set: its path under `data/` and its SHA-256. */
export interface ManifestEntry {
  readonly path: string;
  readonly sha256: string;
}

/** Parses `sha256sum` output (`<hex>  ./<path>`), refusing paths that would leave `data/`. */
export function parseManifest(text: string): ManifestEntry[] {
  const entries: ManifestEntry[] = [];
  for (const [i, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue;
    const match = /^([0-9a-f]{64}) [ *](.+)$/.exec(line);
    if (!match) throw new AgentRlError(`SHA256SUMS line ${i + 1} is not "<sha256>  <path>": ${line.slice(0, 120)}`);
    const path = match[2]!.replace(/^\.\//, "");
    if (isAbsolute(path) || path.split("/").includes(".."))
      throw new AgentRlError(`SHA256SUMS line ${i + 1} names a path outside data/: ${path}`);
    entries.push({ path, sha256: match[1]! });
  }
  return entries;
}

/** The manifest shipped with this build. */
export function pinnedManifest(): ManifestEntry[] {
  return parseManifest(readFileSync(MANIFEST_PATH, "utf8"));
}

export function sha256Of(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Tasks that read AgentBench's published data (`dbbench-std`, `os-dev`, ...). */
export function needsAgentBenchData(task: string): boolean {
  return /^(dbbench-(std|dev)|os-(std|dev|env_train))$/.test(task);
}

/** The data folder, from the environment variable, else the config field, else the default fetch target. */
export function resolveAgentBenchDir(configured?: string): string | undefined {
  const fromEnv = process.env[AGENTBENCH_DIR_ENV];
  if (fromEnv) return resolve(fromEnv);
  if (configured) return resolve(configured);
  return existsSync(join(AGENTBENCH_DEFAULT_DIR, "data")) ? resolve(AGENTBENCH_DEFAULT_DIR) : undefined;
}

/** The one line a user reads when the data is missing: both ways to point at it, and how to get it. */
export function missingDataMessage(what: string, looked?: string): string {
  const where = looked ? ` (looked for ${looked})` : "";
  return (
    `AgentBench data not found for ${what}${where}: set ${AGENTBENCH_DIR_ENV} or tasks.agentbench.dir in the config ` +
    "to a folder with AgentBench's layout (data/dbbench/..., data/os_interaction/...), " +
    `or run \`agentrl data fetch agentbench\` (writes ${AGENTBENCH_DEFAULT_DIR})`
  );
}

/**
 * Reads one file of the data set (`dbbench/standard.jsonl`), checked against the pinned hash when
 * the manifest lists it: instance indices are line numbers, so a changed file would silently
 * renumber every instance.
 */
export function readAgentBenchFile(path: string, configuredDir?: string): { text: string; file: string } {
  const dir = resolveAgentBenchDir(configuredDir);
  if (!dir) throw new AgentRlError(missingDataMessage(path));
  const file = join(dir, "data", path);
  if (
    !relative(join(dir, "data"), file)
      .split(sep)
      .every((part) => part !== "..")
  )
    throw new AgentRlError(`AgentBench path escapes data/: ${path}`);
  if (!existsSync(file) || !statSync(file).isFile()) throw new AgentRlError(missingDataMessage(path, file));
  const bytes = readFileSync(file);
  const pinned = pinnedManifest().find((entry) => entry.path === path);
  if (pinned && sha256Of(bytes) !== pinned.sha256)
    throw new AgentRlError(
      `${file} differs from AgentBench commit ${AGENTBENCH_COMMIT.slice(0, 7)} (sha256 ${sha256Of(bytes).slice(0, 12)}…, expected ${pinned.sha256.slice(0, 12)}…); ` +
        "instance indices would not match upstream's: run `agentrl data fetch agentbench` again",
    );
  return { text: bytes.toString("utf8"), file };
}
