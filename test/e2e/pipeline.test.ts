import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runPipeline } from "../../cli/launch/pipeline.ts";
import { readMetrics } from "../../cli/report/report.ts";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { parseJsonOrThrow } from "../../shared/errors.ts";
import { listVersions } from "../../shared/model/checkpoint.ts";
import { Trajectory } from "../../shared/protocol/messages.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { readLedger } from "../../trainer-image/trainer/ledger.ts";
import { type MotoServer, startMoto } from "../support/moto.ts";

/** A model small enough that the test is about the pipeline, not about arithmetic speed. */
const TINY_MODEL = { vocabSize: 400, dModel: 32, layers: 1, heads: 2, kvHeads: 1, ffnHidden: 64, contextLength: 2048 };
const MAX_STEPS = 3;

function tinyConfig(experimentId: string, transport: Record<string, unknown> = {}): ExperimentConfig {
  return parseConfig({
    experimentId,
    transport,
    policy: { model: TINY_MODEL },
    tasks: {
      mix: [
        { name: "db", concurrency: 8 },
        { name: "kg", concurrency: 8 },
      ],
    },
    rollout: { groupSize: 2, maxTokensPerTurn: 24, maxTurns: 3, workers: 1, concurrency: 4 },
    trainer: { batchSize: 2, maxSteps: MAX_STEPS, warmupFactor: 1, maxStaleness: 1 },
  });
}

/** Runs one experiment end to end and checks what issue 6 asks of it. */
async function runAndCheck(config: ExperimentConfig, base: string, faults = false): Promise<void> {
  const runDir = mkdtempSync(join(tmpdir(), `agentrl-e2e-${config.experimentId}-`));
  const killer = faults ? killAfterFirstStep(runDir, ["trainer", "rollout"]) : undefined;
  const result = await runPipeline({ config, runDir, baseCheckpoint: base, evalInstances: 1 });
  if (killer) {
    // The trainer and the rollout worker were SIGKILLed after step 1; the supervisor restarted both.
    expect(await killer).toEqual(["trainer", "rollout"]);
    for (const role of ["trainer", "rollout-0"])
      expect(readFileSync(join(runDir, "logs", `${role}.log`), "utf8")).toMatch(/\[supervisor\] .* restart 1/);
  }

  // At least 3 trainer steps, each publishing a version.
  expect(result.interrupted).toBe(false);
  expect(result.steps).toBe(MAX_STEPS);
  const records = await readMetrics(join(runDir, "metrics.jsonl"));
  expect(records.map((r) => r.version)).toEqual([1, 2, 3]);

  // Every consumed trajectory exists in the store, and none was consumed twice (ledger of the newest version).
  const runConfig = parseConfig(JSON.parse(readFileSync(join(runDir, "config.json"), "utf8")));
  const transport = await createTransport(runConfig.transport);
  try {
    const checkpoints = transport.store("checkpoints");
    expect([...(await listVersions(checkpoints))].sort()).toEqual([0, 1, 2, 3]);
    const ledgers = await Promise.all([1, 2, 3].map((v) => readLedger(checkpoints, v)));
    const consumed = ledgers.map((l) => l?.consumed ?? []);
    expect(new Set(consumed[2]).size).toBe(consumed[2]?.length);
    expect(consumed[2]?.length).toBeGreaterThanOrEqual(MAX_STEPS * 2 * 2);
    for (const earlier of [consumed[0], consumed[1]]) for (const id of earlier ?? []) expect(consumed[2]).toContain(id);

    const stored = await transport.store("trajectories").list(`trajectories/${config.experimentId}/`);
    const storedIds = new Set<string>();
    for (const object of stored) {
      const text = await transport.store("trajectories").getText(object.key);
      storedIds.add(parseJsonOrThrow(Trajectory, text ?? "", object.key).trajectoryId);
    }
    for (const id of consumed[2] ?? []) expect(storedIds.has(id)).toBe(true);
  } finally {
    await transport.close();
  }

  // The staleness bound holds for every trained token, and per-token versions were recorded.
  for (const record of records) {
    expect(record.metrics["rollout/staleness_max_bounded"] ?? 0).toBeLessThanOrEqual(config.trainer.maxStaleness);
    expect(record.metrics["rollout/trajectories"]).toBeGreaterThan(0);
  }

  // The closing evaluation compared the base with the newest version, and the report exists.
  expect(result.evals.map((e) => e.policy)).toEqual(["v0 (base)", "v3"]);
  expect(result.reportFile).toBe(join(runDir, "report.html"));
}

/** SIGKILLs the named roles of the run in `runDir` once its trainer has published a first step. */
async function killAfterFirstStep(runDir: string, roles: readonly string[]): Promise<string[]> {
  const configFile = join(runDir, "config.json");
  for (let waited = 0; waited < 300_000; waited += 200) {
    const metrics = existsSync(join(runDir, "metrics.jsonl"))
      ? readFileSync(join(runDir, "metrics.jsonl"), "utf8")
      : "";
    if (metrics.trim() !== "") break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const killed: string[] = [];
  const processes = execFileSync("ps", ["-eo", "pid=,args="], { encoding: "utf8" }).split("\n");
  for (const role of roles) {
    const line = processes.find((p) => p.includes(configFile) && p.includes(`agentrl.mjs ${role} `));
    if (!line) continue;
    process.kill(Number(line.trim().split(/\s+/)[0]), "SIGKILL");
    killed.push(role);
  }
  return killed;
}

describe("the whole pipeline, end to end on tiny settings", () => {
  let base: string;
  let moto: MotoServer | undefined;

  beforeAll(() => {
    base = mkdtempSync(join(tmpdir(), "agentrl-e2e-base-"));
    const sets = Object.entries(TINY_MODEL).flatMap(([k, v]) => ["--set", `policy.model.${k}=${v}`]);
    const sft = spawnSync(
      process.execPath,
      ["bin/agentrl.mjs", "sft", "--out", base, "--tasks", "db", "kg", "--episodes", "3", "--steps", "2", ...sets],
      { encoding: "utf8" },
    );
    expect(sft.status, sft.stderr).toBe(0);
  }, 240_000);

  afterAll(async () => {
    await moto?.stop();
  });

  it("on the local transport (SQLite queue + directory store), surviving a SIGKILLed trainer and rollout worker", async () => {
    await runAndCheck(tinyConfig("e2e-local", { visibilityTimeoutSeconds: 10 }), base, true);
  }, 420_000);

  it("against an AWS-API endpoint (a real moto server: SQS + S3)", async () => {
    moto = await startMoto();
    await runAndCheck(tinyConfig("e2e-moto", { kind: "aws", endpoint: moto.endpoint, queuePrefix: "e2e" }), base);
  }, 420_000);
});
