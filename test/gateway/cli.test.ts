import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../shared/config/index.ts";
import { initBackend } from "../../shared/model/backend.ts";
import { saveCheckpoint } from "../../shared/model/checkpoint.ts";
import { createPolicy } from "../../shared/model/transformer.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { exampleCodec } from "../roles/rolloutHelpers.ts";
import { AGENTRL_BIN, agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";
import { ADMIN_KEY, post } from "./harness.ts";

describe("agentrl gateway", () => {
  it("refuses to start without AGENTRL_GATEWAY_ADMIN_KEY, naming it", async () => {
    const env = { ...process.env };
    delete env.AGENTRL_GATEWAY_ADMIN_KEY;
    const result = await agentrl(["gateway", "--current-url", "http://127.0.0.1:1/v1"], { env });
    expect(result.status).toBe(1);
    expect(result.stderr).toMatch(/AGENTRL_GATEWAY_ADMIN_KEY is not set/);
  });

  it("serves sessions against a run's config and stops on SIGTERM with its counts", async () => {
    const dir = tempDir("gateway-cli-");
    const config = parseConfig({ experimentId: "cli", transport: { localDir: join(dir, "transport") } });
    const transport = await createTransport(config.transport);
    const codec = await exampleCodec();
    await initBackend("cpu");
    const policy = createPolicy(
      { vocabSize: 512, dModel: 8, layers: 1, heads: 1, kvHeads: 1, ffnHidden: 8, contextLength: 64 },
      1,
      {
        version: 0,
      },
    );
    await saveCheckpoint(transport.store("checkpoints"), policy, {
      version: 0,
      step: 0,
      parent: null,
      tokenizerJson: JSON.stringify(codec.tokenizerJson()),
    });
    policy.dispose();
    await transport.close();
    const configFile = join(dir, "config.json");
    writeFileSync(configFile, JSON.stringify(config));
    const child = spawn(
      process.execPath,
      [AGENTRL_BIN, "gateway", "--config", configFile, "--current-url", "http://127.0.0.1:1/v1", "--port", "0"],
      { env: { ...process.env, AGENTRL_GATEWAY_ADMIN_KEY: ADMIN_KEY }, stdio: ["ignore", "pipe", "pipe"] },
    );
    const lines = createInterface({ input: child.stdout });
    const events: Array<Record<string, unknown>> = [];
    const listening = new Promise<string>((resolve, reject) => {
      lines.on("line", (line) => {
        const event = JSON.parse(line) as Record<string, unknown>;
        events.push(event);
        if (event.event === "listening") resolve(String(event.url));
      });
      child.once("exit", (code) => reject(new Error(`gateway exited with ${code}`)));
    });
    const url = await listening;
    const created = await post(`${url}/v1/sessions`, ADMIN_KEY, { task: "example" });
    expect(created.status).toBe(201);
    expect(created.json.baseUrl).toBe(`${url}/sessions/${created.json.sessionId}/v1`);
    expect((await post(`${url}/v1/sessions`, "not-the-admin-key-at-all", {})).status).toBe(401);
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    expect(events.at(-1)).toMatchObject({ event: "stopped", role: "gateway", sessions: 1, refused: 0 });
  }, 120_000);
});
