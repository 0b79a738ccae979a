import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { isMainThread } from "node:worker_threads";
import { describe, expect, it } from "vitest";
import config, { OWN_PROCESS } from "../../vitest.config.ts";

/**
 * vitest.config.ts runs most test files in worker threads they share; a file that changes what the
 * next file in its thread would see must be listed in OWN_PROCESS. These are the changes that
 * no setup file undoes: TF.js's backend and engine (one per thread) and vitest's stubbed globals
 * and fake timers.
 */
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const PROCESS_WIDE = [
  /\binitBackend\(/,
  /\bsetBackend\(/,
  /^import [^;]*from "@tensorflow\//m,
  /vi\.useFakeTimers\(/,
  /vi\.stubGlobal\(/,
];

function testFiles(dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return testFiles(path);
    return entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

/** OWN_PROCESS holds exact paths and `<dir>/*.test.ts` (that folder's files, not its subfolders'). */
function matches(glob: string, file: string): boolean {
  return glob.endsWith("/*.test.ts") ? dirname(file) === glob.slice(0, -"/*.test.ts".length) : file === glob;
}

function ownProcess(file: string): boolean {
  return OWN_PROCESS.some((glob) => matches(glob, file));
}

describe("test files that change process-wide state", () => {
  const files = ["test", "env-images"].flatMap(testFiles); // relative to the repository root

  it("finds the suite's files, and knows the listed ones from the others", () => {
    expect(files.length).toBeGreaterThan(100);
    expect(ownProcess("test/model/backend.test.ts")).toBe(true);
    expect(ownProcess("test/unit/quickstart.test.ts")).toBe(true);
    expect(ownProcess("test/unit/cli.test.ts")).toBe(false);
    expect(ownProcess("test/rl/fixtures/x.test.ts")).toBe(false);
  });

  it("run in a process of their own (vitest.config.ts OWN_PROCESS)", () => {
    const shared = files.filter((file) => !ownProcess(file));
    const offending = shared.filter((file) => {
      const source = readFileSync(join(ROOT, file), "utf8");
      return PROCESS_WIDE.some((pattern) => pattern.test(source));
    });
    expect(offending).toEqual([]);
    // every listed entry still names a test file or a folder of them
    expect(OWN_PROCESS.filter((glob) => !files.some((file) => matches(glob, file)))).toEqual([]);
  });
});

describe("the pools those files run on", () => {
  // vitest decides whether a pool reuses its workers from the root's poolOptions alone (a project's
  // own poolOptions never reach the pool): one pool per kind of file.
  const test = config.test ?? {};
  const project = (name: string) =>
    (test.projects ?? []).flatMap((entry) =>
      typeof entry === "object" && "test" in entry && entry.test?.name === name ? [entry.test] : [],
    )[0];

  it("runs the shared files on the threads pool, whose workers are reused, and each listed file in a fresh fork", () => {
    expect(project("shared")).toMatchObject({ pool: "threads", isolate: false, exclude: OWN_PROCESS });
    expect(test.poolOptions?.threads?.isolate).toBe(false);
    expect(project("own-process")).toMatchObject({ pool: "forks", include: OWN_PROCESS });
    expect(test.poolOptions?.forks?.isolate ?? true).toBe(true);
    // one after the other, so that no more than two files run at once
    expect(project("shared")?.sequence?.groupOrder).toBe(0);
    expect(project("own-process")?.sequence?.groupOrder).toBe(1);
  });

  it("gives every file the setup files that undo what it leaves behind (test/unit/sharedThread.test.ts runs them)", () => {
    expect(project("shared")?.setupFiles).toEqual(["test/support/restoreEnv.ts", "test/support/removeTempDirs.ts"]);
    expect(project("own-process")?.setupFiles).toEqual(["test/support/removeTempDirs.ts"]);
  });

  it("runs this file, a shared one, in a worker thread", () => {
    expect(isMainThread).toBe(false);
  });
});
