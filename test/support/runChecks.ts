import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { expect } from "vitest";
import { readMetrics } from "../../cli/report/report.ts";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { listVersions } from "../../shared/protocol/checkpoints.ts";
import { tensorboardPrefix } from "../../shared/tracking/index.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { readLedger } from "../../trainer-image/trainer/ledger.ts";
import { storedTrajectories } from "./pipelineRun.ts";
import { commandMissing, requireOrSkip } from "./requirements.ts";
import { decodeEvent, decodeEventFolder, tfRecordFrames } from "./tfrecord.ts";

/**
 * What a finished training run must hold, read back from its run folder and the stores its
 * config names (a local transport's folder, or S3 and SQS at an AWS-API endpoint): every step
 * published a version; each trajectory trained once and exists in the store; the staleness bound
 * held for every trained token; the closing evaluation compared the base with the newest version;
 * the report exists; TensorBoard holds every metric the run logged. The README's runs
 * (test/readme/commands.test.ts) end with it, on the local transport and against moto.
 */
export async function expectFinishedRun(runDir: string, steps: number): Promise<void> {
  const config = parseConfig(JSON.parse(readFileSync(join(runDir, "config.json"), "utf8")));
  expect(config.trainer.skipUniformGroups).toBe(false); // every step trains its whole batch (below)

  // Every trainer step published a version and wrote its metrics line.
  const versions = Array.from({ length: steps }, (_, i) => i + 1);
  const records = await readMetrics(join(runDir, "metrics.jsonl"));
  expect(records.map((r) => r.version)).toEqual(versions);

  // Every consumed trajectory exists in the store, and none was consumed twice (the newest version's ledger).
  const transport = await createTransport(config.transport);
  try {
    const checkpoints = transport.store("checkpoints");
    expect([...(await listVersions(checkpoints))].sort((a, b) => a - b)).toEqual([0, ...versions]);
    const ledgers = await Promise.all(versions.map((v) => readLedger(checkpoints, v)));
    const consumed = ledgers.map((l) => l?.consumed ?? []);
    const newest = consumed.at(-1) ?? [];
    expect(new Set(newest).size).toBe(newest.length);
    // every step trained its batch; ids dropped as stale or abandoned with their group are consumed too
    expect(newest.length).toBeGreaterThanOrEqual(steps * config.trainer.batchSize * config.rollout.groupSize);
    for (const earlier of consumed.slice(0, -1)) for (const id of earlier) expect(newest).toContain(id);
    const stored = await storedTrajectories(transport.store("trajectories"));
    for (const id of newest) expect(stored.has(id)).toBe(true);
  } finally {
    await transport.close();
  }

  // The staleness bound holds for every trained token.
  for (const record of records) {
    expect(record.metrics["rollout/staleness_max_plain"] ?? 0).toBeLessThanOrEqual(config.trainer.maxStaleness);
    expect(record.metrics["rollout/trajectories"]).toBeGreaterThan(0);
  }

  // The closing evaluation compared the base with the newest version on every task; the report exists.
  const instances = config.evaluation.instances;
  for (const [file, policy] of [
    ["eval-v0_base_.json", "v0 (base)"],
    [`eval-v${steps}.json`, `v${steps}`],
  ] as const) {
    const report = JSON.parse(readFileSync(join(runDir, file), "utf8")) as {
      policy: string;
      tasks: { task: string; episodes: number }[];
    };
    expect(report.policy).toBe(policy);
    const byTask = Object.fromEntries(report.tasks.map((t) => [t.task, t.episodes]));
    expect(byTask).toEqual(Object.fromEntries(config.tasks.mix.map((t) => [t.name, instances])));
  }
  expect(existsSync(join(runDir, "report.html"))).toBe(true);

  // TensorBoard (tracking.tensorboard on by default): every metric key the run logged with a finite
  // value, the histograms and the closing evaluation's table, read back by protoc.
  if (hasProtoc) {
    // on the AWS transport the trainer writes them to the trajectory bucket (read as s3://)
    const decoded = (
      config.transport.kind === "aws"
        ? await decodeEventObjects(config, tensorboardPrefix(config.experimentId))
        : decodeEventFolder(join(runDir, "tensorboard"))
    ).join("\n");
    const keys = new Set(
      records.flatMap((r) =>
        Object.entries(r.metrics)
          .filter(([, v]) => Number.isFinite(v))
          .map(([k]) => k),
      ),
    );
    for (const key of keys) expect(decoded, key).toContain(`tag: "${key}"`);
    for (const tag of ["advantages", "staleness", "evaluation"]) expect(decoded).toContain(`tag: "${tag}"`);
    expect(decoded).toContain('plugin_name: "text"');
  }
}

/** Every record of the event files under `prefix` in the run's trajectory store, decoded by protoc. */
async function decodeEventObjects(config: ExperimentConfig, prefix: string): Promise<string[]> {
  const transport = await createTransport(config.transport);
  try {
    const store = transport.store("trajectories");
    const decoded: string[] = [];
    for (const { key } of await store.list(prefix))
      decoded.push(...tfRecordFrames((await store.get(key)) as Uint8Array).map(decodeEvent));
    return decoded;
  } finally {
    await transport.close();
  }
}

const hasProtoc = requireOrSkip(
  "readme/commands.test.ts",
  "TensorBoard files of a run decoded by protoc",
  commandMissing("protoc", "apt-get install -y protobuf-compiler"),
);
