import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const SYNC_CALL = /\b(spawnSync|execFileSync|execSync)\(/g;

/** The text of the call whose `(` is at `open`, to its matching `)`. */
function callText(source: string, open: number): string {
  let depth = 0;
  for (let i = open; i < source.length; i++) {
    if (source[i] === "(") depth++;
    else if (source[i] === ")" && --depth === 0) return source.slice(open, i + 1);
  }
  return source.slice(open);
}

/** `file:line call` for every synchronous child-process call in `source` that sets no timeout. */
function untimedSyncCalls(file: string, source: string): string[] {
  const found: string[] = [];
  for (const match of source.matchAll(SYNC_CALL)) {
    const open = (match.index ?? 0) + match[0].length - 1;
    if (!/\btimeout\b/.test(callText(source, open))) {
      const line = source.slice(0, match.index).split("\n").length;
      found.push(`${file}:${line} ${match[1]}`);
    }
  }
  return found;
}

function testSources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
    .map((entry) => join(entry.parentPath, entry.name));
}

describe("synchronous child processes in the tests", () => {
  it("finds a call without a timeout, and accepts one with", () => {
    expect(untimedSyncCalls("a.ts", 'const r = spawnSync("ps", ["-e"], { encoding: "utf8" });')).toEqual([
      "a.ts:1 spawnSync",
    ]);
    expect(untimedSyncCalls("a.ts", 'x;\nexecFileSync("protoc", [f(1)], {\n  input,\n});')).toEqual([
      "a.ts:2 execFileSync",
    ]);
    expect(untimedSyncCalls("a.ts", 'spawnSync("ps", [g(2)], { timeout: SYNC_TIMEOUT_MS });')).toEqual([]);
  });

  it("every spawnSync / execFileSync / execSync a test starts has a timeout (a call that never returns blocks its worker past every test timeout)", () => {
    const self = fileURLToPath(import.meta.url); // its examples above are strings
    const files = [...testSources(join(ROOT, "test")), ...testSources(join(ROOT, "env-images"))].filter(
      (file) => file !== self,
    );
    expect(files.length).toBeGreaterThan(100);
    const untimed = files.flatMap((file) => untimedSyncCalls(relative(ROOT, file), readFileSync(file, "utf8")));
    expect(untimed).toEqual([]);
  });
});
