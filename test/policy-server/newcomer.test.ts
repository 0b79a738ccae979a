import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import { AGENTRL_BIN, agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";

const BASE = join(AGENTRL_BIN, "../../trainer-image/base-policy");

/** `agentrl policy serve` started as a newcomer would: a fresh folder, no store, no config. */
function startServer(
  cwd: string,
  args: readonly string[],
): { child: ChildProcess; url: Promise<string>; log: () => string } {
  const child = spawn(process.execPath, [AGENTRL_BIN, "policy", "serve", "--port", "0", ...args], {
    cwd,
    // the newcomer's default log level (vitest would lower it to warn)
    env: { ...process.env, AGENTRL_LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
  });
  const url = new Promise<string>((resolve, reject) => {
    let stdout = "";
    child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      const match = /"event":"listening".*"url":"([^"]+)"/.exec(stdout);
      if (match?.[1]) resolve(match[1]);
    });
    child.once("exit", (code) => reject(new Error(`policy serve exited (${code}): ${stderr}`)));
  });
  return { child, url, log: () => stderr };
}

describe("agentrl policy serve / publish, as a newcomer meets them", () => {
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const child of children) child.kill("SIGTERM");
  });

  it("serves the committed base policy as v0 from an empty store, and --pin serves a folder's version", async () => {
    const fresh = startServer(tempDir("agentrl-newcomer-"), []);
    const pinned = startServer(tempDir("agentrl-newcomer-"), ["--pin", BASE]);
    children.push(fresh.child, pinned.child);
    const [freshUrl, pinnedUrl] = await Promise.all([fresh.url, pinned.url]);

    const firstLine = JSON.parse(fresh.log().split("\n")[0] ?? "{}") as { msg?: string; policyVersion?: number };
    expect(firstLine.policyVersion).toBe(0);
    expect(firstLine.msg).toMatch(
      /^serving policy v0 from base .*trainer-image\/base-policy \(the checkpoint store is empty\)/,
    );
    const pinnedLine = JSON.parse(pinned.log().split("\n")[0] ?? "{}") as { msg?: string };
    expect(pinnedLine.msg).toMatch(/^serving policy v0 from folder .*base-policy \(pinned\)$/);

    for (const url of [freshUrl, pinnedUrl]) {
      const response = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ messages: [{ role: "user", content: "hello" }], max_tokens: 4, temperature: 0 }),
      });
      expect(response.status).toBe(200);
      const body = (await response.json()) as { choices: Array<{ agentrl: { policy_versions: number[] } }> };
      expect(body.choices[0]?.agentrl.policy_versions.every((v) => v === 0)).toBe(true);
    }
  }, 120_000);

  it("publishes a checkpoint folder into a store once; a second run changes nothing", async () => {
    const dir = tempDir("agentrl-publish-");
    const args = ["policy", "publish", "--from", BASE, "--set", `transport.localDir=${dir}`];
    const first = await agentrl(args);
    expect(first.stderr).toBe("");
    expect(JSON.parse(first.stdout)).toMatchObject({ event: "published", version: 0 });
    const store = new LocalObjectStore(join(dir, "objects", "checkpoints"));
    const manifest = await store.getText("policies/v0/manifest.json");
    expect(manifest).toBe(readFileSync(join(BASE, "policies/v0/manifest.json"), "utf8"));

    const again = await agentrl(args);
    expect(JSON.parse(again.stdout)).toMatchObject({ event: "already-published", version: 0 });
    expect(await store.getText("policies/v0/manifest.json")).toBe(manifest);

    const missing = await agentrl(["policy", "publish", "--from", dir, "--set", `transport.localDir=${dir}`]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/--from: .* has no valid version 0/);
  }, 60_000);
});
