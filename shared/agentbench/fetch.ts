import { mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { AgentRlError } from "../errors.ts";
import {
  AGENTBENCH_COMMIT,
  AGENTBENCH_DEFAULT_BASE_URL,
  type ManifestEntry,
  pinnedManifest,
  sha256Of,
} from "./data.ts";

/** Where the files come from: a base URL (`<base>/<commit>/data/<path>`) or a local folder with AgentBench's layout. */
export type FetchSource =
  | { readonly kind: "url"; readonly baseUrl: string }
  | { readonly kind: "dir"; readonly dir: string };

export interface FetchOptions {
  /** Target folder; receives `data/<path>` for every manifest entry. */
  readonly dir: string;
  readonly source?: FetchSource;
  readonly manifest?: readonly ManifestEntry[];
  /** Per-file download limit. */
  readonly timeoutMs?: number;
  readonly onFile?: (path: string, bytes: number) => void;
}

export interface FetchResult {
  readonly dir: string;
  readonly files: number;
  readonly bytes: number;
}

/** Largest file the data set holds is ~3 MB; anything far past that is not the file we asked for. */
const MAX_FILE_BYTES = 64 * 1024 * 1024;

async function download(url: string, timeoutMs: number): Promise<Uint8Array> {
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: "follow" });
  } catch (error) {
    throw new AgentRlError(
      `cannot download ${url}: ${error instanceof Error ? error.message : String(error)} ` +
        "(without a network, copy the files with --from <a clone of AgentBench or its data folder>)",
    );
  }
  if (!response.ok) throw new AgentRlError(`cannot download ${url}: HTTP ${response.status}`);
  const declared = Number(response.headers.get("content-length") ?? "0");
  if (declared > MAX_FILE_BYTES) throw new AgentRlError(`${url} is ${declared} bytes, over ${MAX_FILE_BYTES}`);
  const bytes = new Uint8Array(await response.arrayBuffer());
  if (bytes.length > MAX_FILE_BYTES) throw new AgentRlError(`${url} is over ${MAX_FILE_BYTES} bytes`);
  return bytes;
}

async function readSource(source: FetchSource, path: string, timeoutMs: number): Promise<Uint8Array> {
  if (source.kind === "url")
    return download(`${source.baseUrl.replace(/\/+$/, "")}/${AGENTBENCH_COMMIT}/data/${path}`, timeoutMs);
  // `--from` accepts AgentBench's root (data/ inside) or the data folder itself.
  for (const candidate of [join(source.dir, "data", path), join(source.dir, path)]) {
    try {
      return await readFile(candidate);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    }
  }
  throw new AgentRlError(
    `${join(source.dir, "data", path)} is missing (--from must be AgentBench's root or its data/ folder)`,
  );
}

/**
 * A fetch replaces its target whole, so it only ever replaces a folder an earlier fetch made
 * (marked by its SHA256SUMS): never a clone of AgentBench or anything else a user pointed it at.
 */
async function refuseForeignFolder(target: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(target);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  if (names.length > 0 && !names.includes("SHA256SUMS"))
    throw new AgentRlError(
      `${target} exists and was not made by \`agentrl data fetch\` (no SHA256SUMS in it); choose an empty or new --dir`,
    );
}

/**
 * Fetches every file of the pinned manifest into `<dir>/data/`, checking each SHA-256. Files are
 * staged in a sibling temp folder and moved into place only after all of them passed, so a failed
 * or interrupted fetch leaves the target as it was: nothing half-written.
 */
export async function fetchAgentBench(options: FetchOptions): Promise<FetchResult> {
  const manifest = options.manifest ?? pinnedManifest();
  const source = options.source ?? { kind: "url", baseUrl: AGENTBENCH_DEFAULT_BASE_URL };
  const target = resolve(options.dir);
  await refuseForeignFolder(target);
  await mkdir(dirname(target), { recursive: true });
  const staging = await mkdtemp(`${target}.partial-`);
  let bytes = 0;
  try {
    for (const entry of manifest) {
      const content = await readSource(source, entry.path, options.timeoutMs ?? 60_000);
      const actual = sha256Of(content);
      if (actual !== entry.sha256)
        throw new AgentRlError(
          `${entry.path}: sha256 ${actual} does not match AgentBench ${AGENTBENCH_COMMIT.slice(0, 7)}'s ${entry.sha256}; nothing was written`,
        );
      const file = join(staging, "data", entry.path);
      await mkdir(dirname(file), { recursive: true });
      await writeFile(file, content);
      bytes += content.length;
      options.onFile?.(entry.path, content.length);
    }
    await writeFile(join(staging, "SHA256SUMS"), manifest.map((e) => `${e.sha256}  ./${e.path}\n`).join(""));
    // Swap the staged folder in: the old data (if any) moves aside first and goes only after.
    const previous = `${staging}.old`;
    const hadPrevious = await rename(target, previous).then(
      () => true,
      (error: NodeJS.ErrnoException) => {
        if (error.code === "ENOENT") return false;
        throw error;
      },
    );
    await rename(staging, target);
    if (hadPrevious) await rm(previous, { recursive: true, force: true });
    return { dir: target, files: manifest.length, bytes };
  } catch (error) {
    await rm(staging, { recursive: true, force: true });
    throw error;
  }
}
