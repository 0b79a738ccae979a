import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runPipeline } from "../../cli/launch/pipeline.ts";
import { readMetrics } from "../../cli/report/report.ts";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { listVersions } from "../../shared/protocol/checkpoints.ts";
import { tensorboardPrefix } from "../../shared/tracking/index.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { readLedger } from "../../trainer-image/trainer/ledger.ts";
import { waitFor } from "../env/helpers.ts";
import { type MotoServer, startMoto } from "../support/moto.ts";
import {
  buildTinyBase,
  childPids,
  logRecords,
  signalPids,
  storedTrajectories,
  tinyConfig as tinyTrainingConfig,
} from "../support/pipelineRun.ts";
import { commandMissing, requireOrSkip } from "../support/requirements.ts";
import { decodeEvent, decodeEventFolder, tfRecordFrames } from "../support/tfrecord.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * Trainer steps of a run; the faulted one runs longer, so its faults land before the run ends (at
 * 6 steps, on a loaded machine, training once ended before a kill caught a rollout episode, and
 * only the closing evaluation's episodes were lost).
 */
const MAX_STEPS = 3;
const MAX_STEPS_FAULTED = 10;

function tinyConfig(
  experimentId: string,
  transport: Record<string, unknown> = {},
  maxSteps = MAX_STEPS,
): ExperimentConfig {
  // Sampled twice per instance, the way the learning config evaluates.
  return tinyTrainingConfig(experimentId, {
    transport,
    maxSteps,
    evaluation: { instances: 1, temperature: 1, samples: 2 },
  });
}

/** Runs one experiment end to end and checks what issue 6 asks of it. */
async function runAndCheck(config: ExperimentConfig, base: string, faults = false): Promise<void> {
  const runDir = tempDir(`agentrl-e2e-${config.experimentId}-`);
  const injected = faults ? injectFaults(runDir) : undefined;
  const result = await runPipeline({ config, runDir, baseCheckpoint: base });
  const faulted = await injected;
  if (faulted) {
    // The db env worker, then the trainer and the rollout worker were SIGKILLed after step 1: the
    // db env pool replaced its worker, the supervisor restarted the other two.
    expect(faulted.killed).toEqual(["env-db", "trainer", "rollout"]);
    expect(logRecords(runDir, "envpool-db").some((r) => r.decision === "replace")).toBe(true);
    for (const role of ["trainer", "rollout-0"])
      expect(readFileSync(join(runDir, "logs", `${role}.log`), "utf8")).toMatch(/\[supervisor\] .* restart 1/);
  }

  // Every trainer step published a version.
  const steps = config.trainer.maxSteps;
  const versions = Array.from({ length: steps }, (_, i) => i + 1);
  expect(result.interrupted).toBe(false);
  expect(result.steps).toBe(steps);
  const records = await readMetrics(join(runDir, "metrics.jsonl"));
  expect(records.map((r) => r.version)).toEqual(versions);

  // Every consumed trajectory exists in the store, and none was consumed twice (ledger of the newest version).
  const runConfig = parseConfig(JSON.parse(readFileSync(join(runDir, "config.json"), "utf8")));
  const transport = await createTransport(runConfig.transport);
  try {
    const checkpoints = transport.store("checkpoints");
    expect([...(await listVersions(checkpoints))].sort((a, b) => a - b)).toEqual([0, ...versions]);
    const ledgers = await Promise.all(versions.map((v) => readLedger(checkpoints, v)));
    const consumed = ledgers.map((l) => l?.consumed ?? []);
    const newest = consumed.at(-1) ?? [];
    expect(new Set(newest).size).toBe(newest.length);
    expect(newest.length).toBeGreaterThanOrEqual(steps * 2 * 2);
    for (const earlier of consumed.slice(0, -1)) for (const id of earlier) expect(newest).toContain(id);

    const stored = await storedTrajectories(transport.store("trajectories"));
    for (const id of newest) expect(stored.has(id)).toBe(true);
    // An episode whose env worker died is never stored as the infrastructure's failure: if its
    // rerun finished before the run ended, what was stored carries the agent's own outcome (the
    // rollout worker was killed after the retry, so a redelivered rerun may restart at attempt 0).
    for (const id of faulted?.retried ?? []) {
      const trajectory = stored.get(id);
      if (trajectory) expect(trajectory.status).not.toBe("cancelled");
    }
  } finally {
    await transport.close();
  }

  // The staleness bound holds for every trained token, and per-token versions were recorded.
  for (const record of records) {
    expect(record.metrics["rollout/staleness_max_plain"] ?? 0).toBeLessThanOrEqual(config.trainer.maxStaleness);
    expect(record.metrics["rollout/trajectories"]).toBeGreaterThan(0);
  }

  // The closing evaluation compared the base with the newest version, and the report exists.
  expect(result.evals.map((e) => e.policy)).toEqual(["v0 (base) T=1 k=2", `v${steps} T=1 k=2`]);
  for (const row of result.evals.flatMap((e) => e.tasks)) expect(row).toMatchObject({ episodes: 2, samples: 2 });
  expect(result.reportFile).toBe(join(runDir, "report.html"));

  // TensorBoard (tracking.tensorboard on by default): every metric key the run logged with a
  // finite value, the histograms and the closing evaluation's table, read back by protoc.
  if (hasProtoc) {
    // on the AWS transport the trainer writes them to the trajectory bucket (read as s3://)
    const decoded = (
      runConfig.transport.kind === "aws"
        ? await decodeEventObjects(runConfig, tensorboardPrefix(runConfig.experimentId))
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
  "pipeline.test.ts",
  "TensorBoard files of a run decoded by protoc",
  commandMissing("protoc", "apt-get install -y protobuf-compiler"),
);

/** Poll period of the fault injector (it reads logs and lists the store). */
const POLL_MS = 200;
/** Poll period for a running db session: its episodes can be shorter than POLL_MS. */
const SESSION_POLL_MS = 50;

interface InjectedFaults {
  /** Trajectory ids whose episode lost its env worker and was rerun on a fresh session. */
  readonly retried: string[];
  readonly killed: string[];
}

/**
 * Once the trainer has published a first step: SIGKILLs the db env worker while a db episode is
 * running and waits until the rollout worker retries that episode on a fresh session; then
 * SIGKILLs the trainer and the rollout worker. (Waiting for the rerun to be stored races the run's
 * end: the trainer can finish its steps on other groups first.)
 */
/** runPipeline takes the controller's session-API key from the environment (else it generates one). */
const CONTROLLER_SECRET = "e2e-controller-secret-0123456789";
process.env.AGENTRL_CONTROLLER_SECRET = CONTROLLER_SECRET;

async function injectFaults(runDir: string): Promise<InjectedFaults> {
  await waitFor(
    () =>
      existsSync(join(runDir, "metrics.jsonl")) && readFileSync(join(runDir, "metrics.jsonl"), "utf8").trim() !== "",
    300_000,
    "the first trainer step",
    POLL_MS,
  );
  const controllerUrl = logRecords(runDir, "controller").find((r) => r.event === "listening")?.url as string;
  const dbSessionRunning = async () => {
    try {
      const sessions = (await (
        await fetch(`${controllerUrl}/api/list_sessions`, {
          headers: { authorization: `Bearer ${CONTROLLER_SECRET}` },
        })
      ).json()) as Record<string, { name: string }>;
      return Object.values(sessions).some((session) => session.name === "db");
    } catch {
      return false; // the controller is gone: the run ended (the error below says what was missed)
    }
  };
  const retriedEpisodes = () =>
    logRecords(runDir, "rollout-0")
      .filter((r) => r.msg === "infrastructure failure; retrying with a fresh session")
      .map((r) => r.trajectoryId as string);
  const killed: string[] = [];
  let retried: string[] = [];
  // A db episode can end between the listing and the kill (the tiny policy's episodes are short),
  // and then none is lost: kill the worker the pool starts next during its episode, until one is.
  const deadline = Date.now() + 150_000;
  while (retried.length === 0 && Date.now() < deadline) {
    const running = await waitFor(dbSessionRunning, 30_000, "a running db episode", SESSION_POLL_MS).then(
      () => true,
      () => false,
    );
    if (!running) continue;
    // Frozen first: a stopped worker cannot end its episode, so a db session still listed once it
    // is stopped is one the kill loses (killing straight after the listing raced the episode's end).
    const workers = childPids("agentrl.mjs env serve db");
    signalPids(workers, "SIGSTOP");
    if (!(await dbSessionRunning())) {
      signalPids(workers, "SIGCONT");
      continue;
    }
    signalPids(workers, "SIGKILL");
    if (workers.length > 0 && !killed.includes("env-db")) killed.push("env-db");
    await waitFor(
      () => {
        retried = retriedEpisodes();
        return retried.length > 0;
      },
      8_000,
      "the rollout worker to retry the lost episode",
      POLL_MS,
    ).catch(() => undefined);
  }
  if (retried.length === 0) throw new Error("the rollout worker never retried an episode lost with its env worker");
  const configFile = join(runDir, "config.json");
  for (const role of ["trainer", "rollout"]) {
    const pids = childPids(`agentrl.mjs ${role} --config ${configFile}`);
    for (const pid of pids) process.kill(pid, "SIGKILL");
    if (pids.length > 0) killed.push(role);
  }
  return { retried, killed };
}

describe("the whole pipeline, end to end on tiny settings", () => {
  let base: string;
  let moto: MotoServer | undefined;

  beforeAll(async () => {
    // A folder inside the temp dir: the store stages writes in a sibling `<folder>.tmp`.
    base = join(tempDir("agentrl-e2e-base-"), "base");
    await buildTinyBase(base);
  }, 240_000);

  afterAll(async () => {
    await moto?.stop();
  });

  it("on the local transport (SQLite queue + directory store), surviving a SIGKILLed env worker, trainer and rollout worker", async () => {
    await runAndCheck(tinyConfig("e2e-local", { visibilityTimeoutSeconds: 10 }, MAX_STEPS_FAULTED), base, true);
  }, 420_000);

  it("against an AWS-API endpoint (a real moto server: SQS + S3)", async () => {
    moto = await startMoto();
    await runAndCheck(tinyConfig("e2e-moto", { kind: "aws", endpoint: moto.endpoint, queuePrefix: "e2e" }), base);
  }, 420_000);
});
