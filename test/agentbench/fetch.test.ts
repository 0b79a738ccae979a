import { cpSync, existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AGENTBENCH_COMMIT,
  parseManifest,
  pinnedManifest,
  readAgentBenchFile,
  sha256Of,
} from "../../shared/agentbench/data.ts";
import { fetchAgentBench } from "../../shared/agentbench/fetch.ts";
import { agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";
import { agentBenchDataDir, agentBenchMissing, requireOrSkip } from "./support.ts";

/**
 * `agentrl data fetch agentbench`: every file of the pinned manifest, each hash checked, from a
 * mirror over HTTP (here a loopback server standing in for the network) or a local copy; a
 * failed or partial fetch leaves the target as it was.
 */
const source = agentBenchDataDir();
const ready = requireOrSkip("fetch.test.ts", "agentrl data fetch agentbench", agentBenchMissing());

/** A mirror on loopback serving `<commit>/data/<path>` from the local copy, with faults on request. */
let mirror: Server;
let mirrorUrl = "";
const faults = new Map<string, "404" | "corrupt" | "cut">();
beforeAll(async () => {
  if (!ready) return;
  mirror = createServer((req, res) => {
    const prefix = `/${AGENTBENCH_COMMIT}/data/`;
    const path = decodeURIComponent(req.url ?? "").slice(prefix.length);
    const fault = faults.get(path);
    const file = join(source!, "data", path);
    if (!req.url?.startsWith(prefix) || !existsSync(file) || fault === "404") {
      res.writeHead(404).end("not found");
      return;
    }
    const bytes = readFileSync(file);
    if (fault === "corrupt") bytes[0] = (bytes[0]! + 1) % 256;
    if (fault === "cut") {
      res.writeHead(200, { "content-length": String(bytes.length) });
      res.write(bytes.subarray(0, bytes.length >> 1));
      res.destroy();
      return;
    }
    res.writeHead(200, { "content-length": String(bytes.length) }).end(bytes);
  });
  await new Promise<void>((resolve) => mirror.listen(0, "127.0.0.1", resolve));
  mirrorUrl = `http://127.0.0.1:${(mirror.address() as AddressInfo).port}`;
});
afterAll(() => mirror?.close());

function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => join(e.parentPath, e.name));
}

describe.skipIf(!ready)("agentrl data fetch agentbench", () => {
  it("downloads every manifest file from a mirror and checks each SHA-256", async () => {
    const dir = join(tempDir("agentbench-fetch-"), "ab");
    const result = await fetchAgentBench({ dir, source: { kind: "url", baseUrl: mirrorUrl } });
    const manifest = pinnedManifest();
    expect(result.files).toBe(manifest.length);
    for (const entry of manifest) expect(sha256Of(readFileSync(join(dir, "data", entry.path)))).toBe(entry.sha256);
    // The tasks read what the fetch wrote.
    const previous = process.env.AGENTRL_AGENTBENCH_DIR;
    process.env.AGENTRL_AGENTBENCH_DIR = dir;
    try {
      expect(readAgentBenchFile("dbbench/dev.jsonl").file).toBe(join(dir, "data/dbbench/dev.jsonl"));
      expect(readAgentBenchFile("dbbench/dev.jsonl").text.split("\n").filter(Boolean)).toHaveLength(60);
    } finally {
      process.env.AGENTRL_AGENTBENCH_DIR = previous;
    }
  });

  it.each([
    ["a missing file", "404", /HTTP 404/],
    ["a corrupted file", "corrupt", /does not match/],
    ["a download cut mid-way", "cut", /cannot download|does not match|terminated/],
  ] as const)("leaves nothing half-written after %s", async (_what, fault, message) => {
    const parent = tempDir("agentbench-fetch-");
    const dir = join(parent, "ab");
    const victim = pinnedManifest().at(-1)!.path;
    faults.set(victim, fault);
    try {
      await expect(fetchAgentBench({ dir, source: { kind: "url", baseUrl: mirrorUrl } })).rejects.toThrow(message);
    } finally {
      faults.delete(victim);
    }
    expect(existsSync(dir)).toBe(false);
    expect(readdirSync(parent)).toEqual([]);
  });

  it("keeps an earlier complete fetch when a later one fails", async () => {
    const dir = join(tempDir("agentbench-fetch-"), "ab");
    await fetchAgentBench({ dir, source: { kind: "dir", dir: source! } });
    const before = filesUnder(dir).length;
    faults.set("dbbench/standard.jsonl", "corrupt");
    try {
      await expect(fetchAgentBench({ dir, source: { kind: "url", baseUrl: mirrorUrl } })).rejects.toThrow(
        /does not match/,
      );
    } finally {
      faults.delete("dbbench/standard.jsonl");
    }
    expect(filesUnder(dir).length).toBe(before);
    expect(readFileSync(join(dir, "data/dbbench/standard.jsonl"), "utf8").split("\n").filter(Boolean)).toHaveLength(
      300,
    );
  });

  it("copies from a local folder with --from, refusing one whose files differ", async () => {
    const dir = join(tempDir("agentbench-fetch-"), "ab");
    const out = await agentrl(["data", "fetch", "agentbench", "--dir", dir, "--from", source!]);
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toMatch(/\d+ files .* every SHA-256 checked/);
    expect(out.stdout).toContain(`AGENTRL_AGENTBENCH_DIR=${dir}`);

    const tampered = tempDir("agentbench-tampered-");
    cpSync(source!, tampered, { recursive: true });
    writeFileSync(join(tampered, "data/dbbench/dev.jsonl"), "{}\n");
    const target = join(tempDir("agentbench-fetch-"), "ab");
    const refused = await agentrl(["data", "fetch", "agentbench", "--dir", target, "--from", tampered]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/dbbench\/dev\.jsonl: sha256 [0-9a-f]{64} does not match/);
    expect(existsSync(target)).toBe(false);
  });

  it("never replaces a folder it did not make, and names the data set it knows", async () => {
    const foreign = tempDir("agentbench-foreign-");
    writeFileSync(join(foreign, "README.md"), "my AgentBench clone\n");
    await expect(fetchAgentBench({ dir: foreign, source: { kind: "dir", dir: source! } })).rejects.toThrow(
      /was not made by `agentrl data fetch`/,
    );
    expect(readdirSync(foreign)).toEqual(["README.md"]);
    const unknown = await agentrl(["data", "fetch", "imagenet"]);
    expect(unknown.status).not.toBe(0);
    expect(unknown.stderr).toMatch(/unknown data set "imagenet"; available: agentbench/);
  });

  it("tells a user without data where to put it, in one line", async () => {
    const empty = tempDir("agentbench-none-");
    const out = await agentrl(["env", "check", "dbbench-dev", "--n", "1"], { env: { AGENTRL_AGENTBENCH_DIR: empty } });
    expect(out.status).toBe(1);
    expect(out.stderr.trim().split("\n")).toHaveLength(1);
    expect(out.stderr).toMatch(/AGENTRL_AGENTBENCH_DIR or tasks\.agentbench\.dir .*agentrl data fetch agentbench/);
  });

  it("refuses a manifest line that would write outside data/", () => {
    expect(() => parseManifest(`${"a".repeat(64)}  ./../../etc/passwd\n`)).toThrow(/outside data/);
    expect(() => parseManifest("not a line\n")).toThrow(/line 1/);
  });
});
