// The CLI as a cached esbuild bundle of its TypeScript. Every role is a process (`npm start` runs
// about fifteen), and through the tsx loader each start resolves and transforms hundreds of
// modules on a hooks thread; from a bundle (one chunk per lazily loaded command) a role starts
// in about half the CPU time. The bundle is rebuilt, in about a second, whenever a file it was made
// from changed (size or mtime), so an edited checkout never runs stale code. Plain JavaScript:
// this runs before any TypeScript loader exists.

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join, relative as relativePath } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const REPOSITORY_ROOT = fileURLToPath(new URL("..", import.meta.url));
/** This file: a change to how bundles are made makes a new one. */
const BUILDER = fileURLToPath(import.meta.url);

/** Builds older than this, beyond the newest few, are removed when a new one is made. */
const PRUNE_AFTER_MS = 7 * 24 * 3600 * 1000;
const KEEP_NEWEST = 5;

/**
 * The file URL of the bundle's entry for `entry` (a path under `root`), built first if missing or
 * stale; undefined when AGENTRL_BUNDLE=0 or no bundle can be made or read (a read-only install):
 * the caller then loads the sources through tsx.
 * `workers`: worker threads' entries to bundle beside it (default WORKER_ENTRIES); `selfNamed`:
 * modules a thread imports by the URL they give of themselves (default SELF_NAMED_ENTRIES).
 * @param {{ root?: string, entry?: string, workers?: Record<string, string>, selfNamed?: Record<string, string>, cacheDir?: string, env?: NodeJS.ProcessEnv }} [options]
 * @returns {Promise<string | undefined>}
 */
export async function cliBundle(options = {}) {
  const env = options.env ?? process.env;
  if (env.AGENTRL_BUNDLE === "0") return undefined;
  const root = options.root ?? REPOSITORY_ROOT;
  const entry = options.entry ?? "cli/main.ts";
  const workers = options.workers ?? WORKER_ENTRIES;
  const selfNamed = options.selfNamed ?? SELF_NAMED_ENTRIES;
  const cacheDir = options.cacheDir ?? join(root, "node_modules", ".cache", "agentrl-cli");
  try {
    const current = readManifest(cacheDir);
    if (
      current &&
      current.entry === entry &&
      sameFingerprint(BUILDER, current.builder) &&
      unchanged(root, current.inputs)
    )
      return pathToFileURL(join(cacheDir, current.dir, "main.js")).href;
    return await build(root, entry, workers, selfNamed, cacheDir);
  } catch {
    return undefined;
  }
}

/**
 * @typedef {{ entry: string, dir: string, builder: [number, number], inputs: Record<string, [number, number]> }} Manifest
 * `inputs`: every file the bundle was made from (relative to the root) with its [mtimeMs, size];
 * `builder`: this file's.
 */

/** The manifest, or undefined when missing or not one (then a new bundle replaces it). @returns {Manifest | undefined} */
function readManifest(cacheDir) {
  try {
    const manifest = JSON.parse(readFileSync(join(cacheDir, "current.json"), "utf8"));
    const valid =
      typeof manifest?.entry === "string" &&
      typeof manifest.dir === "string" &&
      /^build-[\w-]+$/.test(manifest.dir) &&
      typeof manifest.inputs === "object" &&
      manifest.inputs !== null &&
      Object.values(manifest.inputs).every((recorded) => Array.isArray(recorded));
    return valid ? manifest : undefined;
  } catch {
    return undefined;
  }
}

function fingerprint(path) {
  const stat = statSync(path);
  return [stat.mtimeMs, stat.size];
}

function sameFingerprint(path, recorded) {
  try {
    const now = fingerprint(path);
    return Array.isArray(recorded) && now[0] === recorded[0] && now[1] === recorded[1];
  } catch {
    return false;
  }
}

function unchanged(root, inputs) {
  return Object.entries(inputs).every(([path, recorded]) => sameFingerprint(join(root, path), recorded));
}

/**
 * Worker threads' entries, by the path of their source without extension. Under tsx each is a
 * .mjs that registers the loader in its thread and imports its .ts (about 1.5 s of CPU per thread
 * start); in the bundle each .ts is an entry of its own, and the code that starts the thread is
 * pointed at it. test/unit/cliBundle.test.ts checks that every such .mjs is listed here or below.
 */
export const WORKER_ENTRIES = {
  "trainer-image/policy-server/decodeWorker": "decodeWorker",
  "shared/model/webgpu/worker": "webgpuWorker",
  "shared/model/dataParallelWorker": "dataParallelWorker",
};

/**
 * Modules a worker thread imports by the URL they give of themselves: a data-parallel replica
 * imports the loss module the trainer names (`defineShardLoss(import.meta.url, …)`). In the
 * bundle each is an entry of its own and its import.meta.url names that entry, not its .ts.
 */
export const SELF_NAMED_ENTRIES = {
  "trainer-image/trainer/ppoShard": "ppoShard",
  "trainer-image/sft/nllShard": "nllShard",
};

/** `new URL("./x.mjs", import.meta.url)`: how the code names a worker's .mjs entry. */
const WORKER_URL = /new URL\("(\.{1,2}\/[\w./-]+)\.mjs", import\.meta\.url\)/g;
/** Stands for the chunk's own import.meta.url while the others are replaced. */
const CHUNK_URL = "__agentrl_chunk_url__";

/**
 * Each module keeps its own `import.meta.url` (that of its source file), so paths made from it
 * (package.json, data files) resolve as they do under tsx; a worker's entry is the bundle's, next
 * to every chunk in the output folder.
 */
function sourceUrls(root, workers, selfNamed) {
  return {
    name: "agentrl-source-urls",
    setup(build) {
      build.onLoad({ filter: /\.[cm]?ts$/ }, (args) => {
        const source = readFileSync(args.path, "utf8").replace(WORKER_URL, (call, relative) => {
          const key = relativePath(root, join(dirname(args.path), relative));
          const name = workers[key];
          return name ? `new URL("./${name}.js", ${CHUNK_URL})` : call;
        });
        const ownEntry = selfNamed[relativePath(root, args.path).replace(/\.[cm]?ts$/, "")];
        const ownUrl = ownEntry
          ? `new URL("./${ownEntry}.js", ${CHUNK_URL}).href`
          : JSON.stringify(pathToFileURL(args.path).href);
        return {
          contents: source.replaceAll("import.meta.url", ownUrl).replaceAll(CHUNK_URL, "import.meta.url"),
          loader: "ts",
        };
      });
    },
  };
}

/**
 * Packages the bundle requires, with Node's source maps off, instead of importing them. They are
 * CommonJS: imported as ES modules, Node lexes each of their files for its export names; and with
 * the source maps bin/agentrl.mjs turns on (so that stack traces name our sources' lines) it reads
 * and parses TF.js's 10 MB of maps, for frames that are not ours. Both cost every role that loads
 * TF.js about 0.8 s of CPU at start (docs/commands.md).
 */
export const UNMAPPED_PACKAGES = [
  "@tensorflow/tfjs",
  "@tensorflow/tfjs-backend-wasm",
  "@tensorflow/tfjs-backend-webgpu",
];
const UNMAPPED = "agentrl-unmapped";

/**
 * Each import of an UNMAPPED_PACKAGES package becomes a module that requires it with the maps off
 * and re-exports its names. The names are read in a child process (loading TF.js here would leave
 * its backends registered in the process about to run a command); `packageFiles` collects each
 * package's package.json, so a different installed version makes a new bundle. A package that is
 * not installed (the functions image has no TF.js, the CPU trainer image no WebGPU backend) stays
 * a plain import, which fails only if a command does load it.
 */
function unmappedPackages(root, packageFiles) {
  /** @type {Record<string, { names: string[], manifest: string } | null> | undefined} */
  let installed;
  const packageOf = (name) => {
    installed ??= readPackages(root);
    return installed[name] ?? null;
  };
  return {
    name: UNMAPPED,
    setup(build) {
      const escaped = UNMAPPED_PACKAGES.map((name) => name.replace(/[/.-]/g, "\\$&"));
      build.onResolve({ filter: new RegExp(`^(${escaped.join("|")})$`) }, (args) =>
        packageOf(args.path) ? { path: args.path, namespace: UNMAPPED } : undefined,
      );
      build.onLoad({ filter: /.*/, namespace: UNMAPPED }, (args) => {
        const { names, manifest } = /** @type {{ names: string[], manifest: string }} */ (packageOf(args.path));
        packageFiles.add(relativePath(root, manifest));
        const contents = [
          'import { createRequire } from "node:module";',
          "const mapped = process.sourceMapsEnabled;",
          "if (mapped) process.setSourceMapsEnabled(false);",
          "let loaded;",
          `try { loaded = createRequire(import.meta.url)(${JSON.stringify(args.path)}); }`,
          "finally { if (mapped) process.setSourceMapsEnabled(true); }",
          "export default loaded;",
          ...names
            .filter((name) => name !== "default" && /^[A-Za-z_$][\w$]*$/.test(name))
            .map((name, i) => `const name${i} = loaded[${JSON.stringify(name)}]; export { name${i} as ${name} };`),
        ].join("\n");
        return { contents, loader: "js", resolveDir: root };
      });
    },
  };
}

/** Each UNMAPPED_PACKAGES package's export names and package.json, or null where it is not installed. */
function readPackages(root) {
  const script = `const found = {};
for (const name of ${JSON.stringify(UNMAPPED_PACKAGES)}) {
  try { found[name] = { names: Object.keys(require(name)), manifest: require.resolve(name + "/package.json") }; }
  catch { found[name] = null; }
}
process.stdout.write(JSON.stringify(found));`;
  try {
    return JSON.parse(
      execFileSync(process.execPath, ["-e", script], {
        cwd: root,
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }),
    );
  } catch {
    return {};
  }
}

async function build(root, entry, workers, selfNamed, cacheDir) {
  const { build: esbuild } = await import("esbuild");
  mkdirSync(cacheDir, { recursive: true });
  const started = Date.now();
  const packageFiles = new Set();
  const dir = `build-${started}-${randomBytes(4).toString("hex")}`;
  const result = await esbuild({
    absWorkingDir: root,
    entryPoints: {
      main: join(root, entry),
      ...Object.fromEntries(
        Object.entries({ ...workers, ...selfNamed }).map(([path, name]) => [name, join(root, `${path}.ts`)]),
      ),
    },
    outdir: join(cacheDir, dir),
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    // node_modules stay where they are; the bundle lives under node_modules/.cache, whose
    // resolution walks up to the same node_modules
    packages: "external",
    sourcemap: "linked",
    metafile: true,
    logLevel: "silent",
    plugins: [unmappedPackages(root, packageFiles), sourceUrls(root, workers, selfNamed)],
  });
  const finished = Date.now();
  const inputs = {};
  // a package an UNMAPPED_PACKAGES module re-exports stands for its package.json; the module itself
  // (`agentrl-unmapped:<package>`) is no file
  const files = Object.keys(result.metafile.inputs).filter((path) => !path.startsWith(`${UNMAPPED}:`));
  for (const path of [...files, ...packageFiles]) {
    const [mtimeMs, size] = fingerprint(join(root, path));
    // edited while the build read it: record it as changed, so the next start builds again (a
    // file dated in the future, from a clock ahead of this one, is recorded as it is)
    inputs[path] = mtimeMs >= started && mtimeMs <= finished ? [-1, -1] : [mtimeMs, size];
  }
  const manifest = join(cacheDir, `current.json.${dir}`);
  writeFileSync(manifest, JSON.stringify({ entry, dir, builder: fingerprint(BUILDER), inputs }));
  renameSync(manifest, join(cacheDir, "current.json")); // atomic: a starting role reads one or the other
  prune(cacheDir, dir);
  return pathToFileURL(join(cacheDir, dir, "main.js")).href;
}

/** Old builds go, but not recent ones: a long run may still load a lazily imported chunk of its own. */
function prune(cacheDir, keep) {
  const builds = readdirSync(cacheDir)
    .filter((name) => name.startsWith("build-") && name !== keep)
    .map((name) => ({ name, mtimeMs: statSync(join(cacheDir, name)).mtimeMs }))
    .sort((a, b) => b.mtimeMs - a.mtimeMs);
  for (const old of builds.slice(KEEP_NEWEST - 1))
    if (Date.now() - old.mtimeMs > PRUNE_AFTER_MS) rmSync(join(cacheDir, old.name), { recursive: true, force: true });
}
