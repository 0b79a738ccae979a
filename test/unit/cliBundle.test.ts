import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
// @ts-expect-error: plain JavaScript (it runs before any TypeScript loader), typed by its JSDoc
import { cliBundle, SELF_NAMED_ENTRIES, WORKER_ENTRIES } from "../../bin/cliBundle.mjs";
import { SYNC_TIMEOUT_MS } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";

type Bundle = (options?: {
  root?: string;
  entry?: string;
  workers?: Record<string, string>;
  selfNamed?: Record<string, string>;
  cacheDir?: string;
  env?: NodeJS.ProcessEnv;
}) => Promise<string | undefined>;
/** The small program below has no worker threads (nor modules they import) unless a test gives it some. */
const bundle: Bundle = (options) => (cliBundle as Bundle)({ workers: {}, selfNamed: {}, ...options });
const REPOSITORY_WORKERS = WORKER_ENTRIES as Record<string, string>;
const REPOSITORY_SELF_NAMED = SELF_NAMED_ENTRIES as Record<string, string>;
const ROOT = fileURLToPath(new URL("../../", import.meta.url));

const BIN = fileURLToPath(new URL("../../bin/agentrl.mjs", import.meta.url));

/** A small TypeScript program: a static import, a lazily imported module, import.meta.url in each. */
function project(): { root: string; cacheDir: string } {
  const root = tempDir("agentrl-bundle-");
  mkdirSync(join(root, "lib"));
  writeFileSync(join(root, "main.ts"), 'import { word } from "./lib/word.ts";\nconsole.log(word());\n');
  writeFileSync(
    join(root, "lib/word.ts"),
    [
      "export function word(): string {",
      '  return "first " + import.meta.url;',
      "}",
      'export const later = async (): Promise<string> => (await import("./lazy.ts")).lazy;',
    ].join("\n"),
  );
  writeFileSync(join(root, "lib/lazy.ts"), 'export const lazy: string = "lazy " + import.meta.url;\n');
  return { root, cacheDir: join(root, "cache") };
}

function run(url: string): string {
  const result = spawnSync(process.execPath, ["--input-type=module", "-e", `await import(${JSON.stringify(url)});`], {
    encoding: "utf8",
    timeout: SYNC_TIMEOUT_MS,
  });
  expect(result.stderr).toBe("");
  return result.stdout.trim();
}

describe("the CLI's bundle (bin/cliBundle.mjs)", () => {
  it("builds once, runs the program with each module's own import.meta.url, and is reused while nothing changed", async () => {
    const { root, cacheDir } = project();
    const url = await bundle({ root, entry: "main.ts", cacheDir });
    expect(url).toMatch(/\/cache\/build-\d+-[0-9a-f]+\/main\.js$/);
    expect(run(url as string)).toBe(`first ${pathToFileURL(join(root, "lib/word.ts")).href}`);
    const manifest = JSON.parse(readFileSync(join(cacheDir, "current.json"), "utf8")) as {
      inputs: Record<string, unknown>;
    };
    expect(Object.keys(manifest.inputs).sort()).toEqual(["lib/lazy.ts", "lib/word.ts", "main.ts"]);
    expect(await bundle({ root, entry: "main.ts", cacheDir })).toBe(url);
    expect(readdirSync(cacheDir).filter((name) => name.startsWith("build-"))).toHaveLength(1);
  });

  it("builds again when a file it was made from changes, even one only imported lazily", async () => {
    const { root, cacheDir } = project();
    const first = await bundle({ root, entry: "main.ts", cacheDir });
    writeFileSync(join(root, "lib/lazy.ts"), 'export const lazy: string = "edited";\n');
    const second = await bundle({ root, entry: "main.ts", cacheDir });
    expect(second).not.toBe(first);
    const chunks = readdirSync(new URL(".", second as string)).filter((name) => name.endsWith(".js"));
    const text = chunks.map((name) => readFileSync(new URL(name, second as string), "utf8")).join("\n");
    expect(text).toContain('"edited"');
    // same size, new mtime: still a change
    writeFileSync(join(root, "main.ts"), 'import { word } from "./lib/word.ts";\nconsole.error(word());\n');
    const edited = await bundle({ root, entry: "main.ts", cacheDir });
    expect(edited).not.toBe(second);
    utimesSync(join(root, "main.ts"), new Date(), new Date(Date.now() + 60_000));
    const touched = await bundle({ root, entry: "main.ts", cacheDir });
    expect(touched).not.toBe(edited);
    // a manifest that is not one (a disk that filled mid-write) is replaced, not trusted or kept
    for (const garbage of ["{", '{"entry":"main.ts","dir":"../elsewhere","inputs":{}}', "null"]) {
      writeFileSync(join(cacheDir, "current.json"), garbage);
      const rebuilt = await bundle({ root, entry: "main.ts", cacheDir });
      expect(rebuilt).toMatch(/\/cache\/build-\d+-[0-9a-f]+\/main\.js$/);
      expect(await bundle({ root, entry: "main.ts", cacheDir })).toBe(rebuilt);
    }
  });

  it("gives no bundle (the caller uses tsx) when AGENTRL_BUNDLE=0, when the sources do not build, or the cache is not writable", async () => {
    const { root, cacheDir } = project();
    expect(await bundle({ root, entry: "main.ts", cacheDir, env: { AGENTRL_BUNDLE: "0" } })).toBeUndefined();
    expect(readdirSync(root)).not.toContain("cache");
    writeFileSync(join(root, "broken.ts"), 'import { missing } from "./nowhere.ts";\nmissing();\n');
    expect(await bundle({ root, entry: "broken.ts", cacheDir })).toBeUndefined();
    // (tests run as root, which ignores permissions: a cache path below a file fails for everyone)
    writeFileSync(join(root, "a-file"), "");
    expect(await bundle({ root, entry: "main.ts", cacheDir: join(root, "a-file", "cache") })).toBeUndefined();
  });

  it("starts a worker thread the sources start from its .mjs from the bundle's own entry for it", async () => {
    const { root, cacheDir } = project();
    writeFileSync(
      join(root, "lib/thread.ts"),
      'import { parentPort } from "node:worker_threads";\nparentPort?.postMessage("thread " + import.meta.url);\n',
    );
    // Under tsx, lib/thread.mjs would register the loader and import thread.ts; the bundle needs no .mjs.
    writeFileSync(
      join(root, "threads.ts"),
      [
        'import { Worker } from "node:worker_threads";',
        'const worker = new Worker(new URL("./lib/thread.mjs", import.meta.url), { execArgv: [] });',
        'worker.once("message", (text: string) => { console.log(text); void worker.terminate(); });',
      ].join("\n"),
    );
    const url = await bundle({ root, entry: "threads.ts", workers: { "lib/thread": "thread" }, cacheDir });
    expect(url).toBeDefined();
    expect(readdirSync(new URL(".", url as string))).toContain("thread.js");
    expect(run(url as string)).toBe(`thread ${pathToFileURL(join(root, "lib/thread.ts")).href}`);
  });

  it("gives a module a thread imports by its own URL that of its own entry of the bundle", async () => {
    const { root, cacheDir } = project();
    // A data-parallel replica imports the loss module whose URL the trainer sends: under tsx its
    // .ts; in the bundle it must be a .js entry, or the thread fails on the .ts extension.
    writeFileSync(join(root, "lib/self.ts"), "export const self: string = import.meta.url;\n");
    writeFileSync(
      join(root, "selfish.ts"),
      [
        'import { self } from "./lib/self.ts";',
        "const again = (await import(self)) as { self: string };",
        'console.log(self.split("/").at(-1), again.self === self);',
      ].join("\n"),
    );
    const url = await bundle({ root, entry: "selfish.ts", selfNamed: { "lib/self": "self" }, cacheDir });
    expect(url).toBeDefined();
    expect(run(url as string)).toBe("self.js true");
  });

  it("bundles every worker thread entry of the repository (each .mjs that registers tsx) and the loss modules replicas import", () => {
    const listed = spawnSync("git", ["ls-files", "*.mjs"], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: SYNC_TIMEOUT_MS,
    }).stdout.split("\n");
    const wrappers = listed
      .filter((path) => path !== "" && path !== "bin/agentrl.mjs")
      .filter((path) => readFileSync(join(ROOT, path), "utf8").includes("tsx/esm/api"))
      .map((path) => path.replace(/\.mjs$/, ""));
    expect(wrappers.length).toBeGreaterThanOrEqual(3);
    expect(Object.keys(REPOSITORY_WORKERS).sort()).toEqual(wrappers.sort());
    // every module made by defineShardLoss (a replica imports it by its own URL) is an entry too
    const lossModules = spawnSync(
      "git",
      ["grep", "-lE", String.raw`^export default defineShardLoss(<.*>)?\(import\.meta\.url`],
      { cwd: ROOT, encoding: "utf8", timeout: SYNC_TIMEOUT_MS },
    )
      .stdout.split("\n")
      .filter((path) => path.endsWith(".ts") && !path.startsWith("test/"))
      .map((path) => path.replace(/\.ts$/, ""));
    expect(lossModules.length).toBeGreaterThanOrEqual(2);
    expect(Object.keys(REPOSITORY_SELF_NAMED).sort()).toEqual(lossModules.sort());
    for (const path of wrappers) expect(readdirSync(join(ROOT, path, ".."))).toContain(`${path.split("/").at(-1)}.ts`);
  });

  it("loads TF.js with source maps off, so its maps are not parsed, while the bundle's own frames still name their sources", async () => {
    // inside the repository, so that the program resolves the repository's TF.js
    const root = mkdtempSync(join(ROOT, "node_modules", ".cache", "agentrl-bundle-maps-"));
    try {
      writeFileSync(
        join(root, "maps.ts"),
        [
          'import * as tf from "@tensorflow/tfjs";',
          'import { createRequire, findSourceMap } from "node:module";',
          'const tfjs = createRequire(import.meta.url).resolve("@tensorflow/tfjs");',
          "const sum = tf.tensor1d([1, 2, 3]).sum().dataSync()[0];",
          'const frame = new Error("here").stack?.split("\\n")[1] ?? "";',
          "console.log(JSON.stringify({ sum, tfjsMapped: findSourceMap(tfjs) !== undefined, frame }));",
        ].join("\n"),
      );
      const cacheDir = join(root, "cache");
      const url = await bundle({ root, entry: "maps.ts", cacheDir });
      expect(url).toBeDefined();
      // as bin/agentrl.mjs runs a bundle: maps on, then the import
      const result = spawnSync(
        process.execPath,
        ["--input-type=module", "-e", `process.setSourceMapsEnabled(true); await import(${JSON.stringify(url)});`],
        { encoding: "utf8", timeout: SYNC_TIMEOUT_MS },
      );
      expect(result.stderr).not.toMatch(/Error/);
      const seen = JSON.parse(result.stdout.trim().split("\n").at(-1) ?? "{}") as Record<string, unknown>;
      expect(seen.sum).toBe(6);
      expect(seen.tfjsMapped).toBe(false);
      expect(seen.frame).toMatch(/maps\.ts:5:\d+/);
      // a different TF.js install (its package.json) makes a new bundle
      const manifest = JSON.parse(readFileSync(join(cacheDir, "current.json"), "utf8")) as {
        inputs: Record<string, unknown>;
      };
      expect(Object.keys(manifest.inputs).filter((path) => path.endsWith("package.json"))).toEqual([
        expect.stringMatching(/@tensorflow\/tfjs\/package\.json$/),
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("leaves an import of TF.js that is not installed as it is (the functions image has none)", async () => {
    const { root, cacheDir } = project(); // outside the repository: no node_modules to resolve from
    writeFileSync(
      join(root, "lazy-tf.ts"),
      'export const model = () => import("@tensorflow/tfjs");\nconsole.log("started without TF.js");\n',
    );
    const url = await bundle({ root, entry: "lazy-tf.ts", cacheDir });
    expect(url).toBeDefined();
    expect(run(url as string)).toBe("started without TF.js");
  });

  it("agentrl runs the same from its bundle and from its sources", () => {
    const env = { ...process.env, AGENTRL_BUNDLE: undefined };
    for (const args of [["--version"], ["config", "validate", "configs/quickstart.yaml"], ["evl"]]) {
      const bundled = spawnSync(process.execPath, [BIN, ...args], { encoding: "utf8", env, timeout: SYNC_TIMEOUT_MS });
      const sources = spawnSync(process.execPath, [BIN, ...args], {
        encoding: "utf8",
        env: { ...env, AGENTRL_BUNDLE: "0" },
        timeout: SYNC_TIMEOUT_MS,
      });
      expect(bundled.status, args.join(" ")).toBe(sources.status);
      expect(bundled.stdout).toBe(sources.stdout);
      expect(bundled.stderr).toBe(sources.stderr);
    }
  });
});
