import { randomBytes } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { runPipeline } from "../cli/launch/pipeline.ts";
import { readMetrics } from "../cli/report/report.ts";
import { ControllerClient } from "../shared/env/client.ts";
import { createLogger, type Logger } from "../shared/log.ts";
import { initBackend } from "../shared/model/backend.ts";
import { loadCheckpoint, saveCheckpoint } from "../shared/model/checkpoint.ts";
import { createPolicy } from "../shared/model/transformer.ts";
import { processRuns } from "../shared/processes.ts";
import { listVersions, manifestKey } from "../shared/protocol/checkpoints.ts";
import { RolloutRequest, TrajectoryReady } from "../shared/protocol/messages.ts";
import { seededRandom } from "../shared/rl/random.ts";
import { sleep } from "../shared/sleep.ts";
import { LocalObjectStore, LocalTransport } from "../shared/transport/local.ts";
import {
  logRecords,
  runPids,
  signalPids,
  storedTrajectories,
  TINY_MODEL,
  tinyConfig,
} from "../test/support/pipelineRun.ts";
import { readLedger } from "../trainer-image/trainer/ledger.ts";

/**
 * The chaos run (issue 19): a local pipeline on the tiny model while every role is SIGKILLed in
 * turn at random times — controller, each env worker, current and stale policy server, feeder,
 * rollout worker, trainer, and the trainer again in its publish window — then the run's
 * invariants are checked. Used by `npm run chaos` (bench/chaos.ts) and test/e2e/chaos.test.ts.
 */

/** The roles killed, in the order of each round; `trainer-publish` is the trainer killed mid-publish. */
export const CHAOS_ROLES = [
  "trainer-publish",
  "controller",
  "env-db",
  "policy-current",
  "feeder",
  "trainer",
  "rollout-0",
  "env-kg",
  "policy-stale",
] as const;
export type ChaosRole = (typeof CHAOS_ROLES)[number];

export interface ChaosOptions {
  /** Folder of the run (config, logs, transport). */
  readonly runDir: string;
  /** Trainer steps the run must finish. */
  readonly steps: number;
  /** Kill rounds (every role once per round) at most; fewer when the run ends first. */
  readonly rounds: number;
  /** Stop killing after this long (the run then finishes its steps undisturbed). */
  readonly chaosMs: number;
  /** Pause between two kills, drawn uniformly from this range (ms). */
  readonly pauseMs: readonly [number, number];
  /**
   * Kill the next role after the pause without waiting for the last one to recover (recoveries
   * are measured side by side, and several roles may be down at once): a round fits a short run.
   * @default false
   */
  readonly overlap?: boolean;
  readonly seed?: number;
  readonly log?: Logger;
  /** Stops the run early (SIGINT or SIGTERM to `npm run chaos`): the kills stop, the pipeline closes, and `runChaos` rejects. */
  readonly signal?: AbortSignal;
}

export interface KillRecord {
  readonly role: ChaosRole;
  /** ms from the kill until the role served again (see `recovered`); undefined when it did not within the limit. */
  readonly recoveryMs: number | undefined;
  /** For `trainer-publish`: the version whose publication was cut (its manifest was absent when the trainer died). */
  readonly cutVersion?: number;
  /** For `trainer-publish`: publishes that finished before the trainer was frozen, each resumed and retried. */
  readonly racesLost?: number;
}

export interface ChaosReport {
  readonly kills: KillRecord[];
  readonly steps: number;
  readonly stepsRequired: number;
  readonly invariants: Record<string, boolean>;
  readonly problems: string[];
  readonly wallSeconds: number;
  readonly loadAverage: number[];
}

/** The command-line needle of each role's process (children of this process). */
const NEEDLES: Record<Exclude<ChaosRole, "trainer-publish">, string> = {
  controller: "agentrl.mjs controller",
  "env-db": "agentrl.mjs env serve db",
  "env-kg": "agentrl.mjs env serve kg",
  "policy-current": "--pool current",
  "policy-stale": "--pool stale",
  feeder: "agentrl.mjs feeder",
  "rollout-0": "agentrl.mjs rollout",
  trainer: "agentrl.mjs trainer",
};

/** How often the mid-publish kill looks the trainer's pid up again (it changes when the trainer restarts). */
const PID_REFRESH_MS = 500;

/** How long a role may take to come back before the kill counts as not survived. */
const RECOVERY_LIMIT_MS = 120_000;
const POLL_MS = 100;
/** The controller cancels a dead rollout worker's sessions after this idle time. */
const SESSION_IDLE_MS = 15_000;

/** The tiny model with the committed base tokenizer's vocabulary (no SFT: a fresh init is enough for chaos). */
const CHAOS_MODEL = { ...TINY_MODEL, vocabSize: 1024 };
const BASE_TOKENIZER = new URL("../trainer-image/base-policy/policies/v0/tokenizer.json", import.meta.url);

/** Writes a freshly initialised tiny policy as version 0 of a store folder (seconds, not an SFT run). */
async function writeFreshBase(dir: string): Promise<void> {
  await initBackend("cpu");
  const policy = createPolicy(CHAOS_MODEL, 1, { version: 0 });
  await saveCheckpoint(new LocalObjectStore(dir), policy, {
    version: 0,
    step: 0,
    parent: null,
    tokenizerJson: readFileSync(BASE_TOKENIZER, "utf8"),
  });
  policy.dispose();
}

/** Runs the chaos experiment and checks its invariants. */
export async function runChaos(options: ChaosOptions): Promise<ChaosReport> {
  const started = Date.now();
  const log = options.log ?? createLogger({ role: "chaos" });
  // runPipeline uses this key when set; the chaos side needs it to read the controller's sessions.
  process.env.AGENTRL_CONTROLLER_SECRET ??= `chaos-${randomBytes(16).toString("hex")}`;
  const base = join(options.runDir, "base", "store");
  await writeFreshBase(base);
  const config = tinyConfig("chaos", {
    maxSteps: options.steps,
    transport: { visibilityTimeoutSeconds: 10 },
    model: CHAOS_MODEL,
  });
  const runDir = join(options.runDir, "run");
  const problems: string[] = [];
  let sessionsLeft: number | undefined;
  let workersBack = false;
  let trainingDone = false;

  const kills: KillRecord[] = [];
  const watching: Promise<void>[] = [];
  const chaos = (async () => {
    const random = seededRandom(options.seed ?? 19);
    const deadline = started + options.chaosMs;
    await waitUntil(
      () => existsSync(join(runDir, "metrics.jsonl")),
      300_000,
      () => trainingDone,
    );
    const over = () => trainingDone || Date.now() > deadline || options.signal?.aborted === true;
    for (let round = 0; round < options.rounds && !over(); round++) {
      for (const role of CHAOS_ROLES) {
        const [low, high] = options.pauseMs;
        await sleep(low + random() * (high - low));
        if (over()) break;
        const watch = killAndWatch(role, runDir, () => trainingDone).then((record) => {
          if (!record) return;
          kills.push(record);
          log.info(
            {
              killed: record.role,
              recoveryMs: record.recoveryMs,
              cutVersion: record.cutVersion,
              racesLost: record.racesLost,
            },
            "chaos kill",
          );
          if (record.recoveryMs === undefined) problems.push(`${role} did not recover within ${RECOVERY_LIMIT_MS} ms`);
        });
        if (options.overlap) watching.push(watch);
        else await watch;
      }
    }
    await Promise.all(watching);
  })();

  const result = await runPipeline({
    config,
    runDir,
    baseCheckpoint: base,
    log,
    ...(options.signal ? { signal: options.signal } : {}),
    roleRestarts: 1_000,
    sessionIdleMs: SESSION_IDLE_MS,
    afterTraining: async ({ controllerUrl, controllerToken }) => {
      trainingDone = true;
      await chaos;
      const client = new ControllerClient({ baseUrl: controllerUrl, token: controllerToken, maxRetries: 3 });
      // The controller's view, rebuilt from heartbeats after its restarts, holds every task again.
      workersBack = await waitUntil(async () => {
        const listing = await client.listWorkers();
        return config.tasks.mix.every((t) =>
          Object.values(listing[t.name]?.workers ?? {}).some((worker) => worker.status === "ALIVE"),
        );
      }, 60_000);
      // No session leaked: the rollout side has stopped, so every session must end.
      await waitUntil(async () => {
        const response = await fetch(`${controllerUrl}/api/list_sessions`, {
          headers: { authorization: `Bearer ${controllerToken}` },
        });
        sessionsLeft = Object.keys((await response.json()) as Record<string, unknown>).length;
        return sessionsLeft === 0;
      }, SESSION_IDLE_MS * 3);
    },
  });
  trainingDone = true;
  await chaos;
  if (options.signal?.aborted) throw new Error(`chaos run stopped by ${String(options.signal.reason)}`);

  const invariants = await checkRun(runDir, config.trainer.maxStaleness, options.steps, problems);
  invariants["controller view rebuilt (every task has an ALIVE worker)"] = workersBack;
  invariants["no session leaked (list_sessions empty)"] = sessionsLeft === 0;
  if (sessionsLeft !== 0) problems.push(`${sessionsLeft ?? "unknown"} sessions left at the end`);
  invariants["every kill recovered"] = kills.every((k) => k.recoveryMs !== undefined);
  invariants["run not interrupted"] = !result.interrupted;
  const cut = kills.filter((k) => k.role === "trainer-publish" && k.cutVersion !== undefined);
  invariants["a publish was cut mid-way"] = cut.length > 0;
  return {
    kills,
    steps: result.steps,
    stepsRequired: options.steps,
    invariants,
    problems,
    wallSeconds: (Date.now() - started) / 1000,
    loadAverage: loadavg().map((v) => Math.round(v * 100) / 100),
  };
}

/** SIGKILLs one role and waits until it serves again; undefined when the role was not running. */
async function killAndWatch(role: ChaosRole, runDir: string, done: () => boolean): Promise<KillRecord | undefined> {
  if (role === "trainer-publish") return killMidPublish(runDir, done);
  const pids = runPids(runDir, NEEDLES[role]);
  if (pids.length === 0) return undefined;
  const before = await snapshot(role, runDir);
  for (const pid of pids) process.kill(pid, "SIGKILL");
  const killedAt = Date.now();
  const back = await waitUntil(() => recovered(role, runDir, pids, before), RECOVERY_LIMIT_MS, done);
  return { role, recoveryMs: back ? Date.now() - killedAt : done() ? Date.now() - killedAt : undefined };
}

/** State before a kill that recovery is measured against. */
interface Snapshot {
  readonly workerAddresses: ReadonlySet<string>;
  readonly steps: number;
}

async function snapshot(role: ChaosRole, runDir: string): Promise<Snapshot> {
  const addresses = new Set<string>();
  if (role.startsWith("env-")) {
    const listing = await controllerClient(runDir)
      ?.listWorkers()
      .catch(() => undefined);
    for (const worker of Object.values(listing?.[role.slice(4)]?.workers ?? {})) addresses.add(worker.address);
  }
  return { workerAddresses: addresses, steps: stepCount(runDir) };
}

/**
 * When a killed role serves again: the controller once every task has an ALIVE worker in its
 * rebuilt view; an env worker once a new worker of its task is ALIVE at the controller; a policy
 * server once /health answers on its URL; the trainer once it finished a step after the kill;
 * the feeder and the rollout worker once their restarted process runs.
 */
async function recovered(
  role: ChaosRole,
  runDir: string,
  killed: readonly number[],
  before: Snapshot,
): Promise<boolean> {
  if (role === "trainer-publish") return false;
  const fresh = runPids(runDir, NEEDLES[role]).filter((pid) => !killed.includes(pid));
  if (fresh.length === 0) return false;
  switch (role) {
    case "controller": {
      const listing = await controllerClient(runDir)
        ?.listWorkers()
        .catch(() => undefined);
      return ["db", "kg"].every((task) =>
        Object.values(listing?.[task]?.workers ?? {}).some((w) => w.status === "ALIVE"),
      );
    }
    case "env-db":
    case "env-kg": {
      const listing = await controllerClient(runDir)
        ?.listWorkers()
        .catch(() => undefined);
      return Object.values(listing?.[role.slice(4)]?.workers ?? {}).some(
        (w) => w.status === "ALIVE" && !before.workerAddresses.has(w.address),
      );
    }
    case "policy-current":
    case "policy-stale": {
      const url = listeningUrl(runDir, role);
      if (!url) return false;
      return fetch(`${url}/health`, { signal: AbortSignal.timeout(2_000) })
        .then((r) => r.ok)
        .catch(() => false);
    }
    case "trainer":
      return stepCount(runDir) > before.steps;
    default:
      return true;
  }
}

/**
 * Kills the trainer inside its publish window. As soon as a new version's folder holds a file
 * (the ledger is written first) the trainer is frozen with SIGSTOP, and only then is the
 * manifest (written last) looked for: absent, the frozen trainer is SIGKILLed mid-publish, as
 * sure to land as a kill can be; present, the publish won the race (a tiny model publishes in
 * milliseconds, and on a loaded machine a poll can come late), so the trainer is resumed with
 * SIGCONT, unharmed, and the next publish is tried. A lost race costs no restart, so it is
 * retried until a kill lands or training ends.
 */
async function killMidPublish(runDir: string, done: () => boolean): Promise<KillRecord | undefined> {
  const policies = join(runDir, "transport", "objects", "checkpoints", "policies");
  const published = () => (existsSync(policies) ? readdirSync(policies).filter((d) => /^v\d+$/.test(d)) : []);
  const known = new Set(published());
  const deadline = Date.now() + RECOVERY_LIMIT_MS;
  // `ps` takes tens of ms on a loaded machine: look the trainer up ahead, not inside the window
  let pids: number[] = [];
  let lookedUp = 0;
  let racesLost = 0;
  const signal = (name: NodeJS.Signals) => signalPids(pids, name);
  while (Date.now() < deadline && !done()) {
    if (Date.now() - lookedUp > PID_REFRESH_MS) {
      pids = runPids(runDir, NEEDLES.trainer);
      lookedUp = Date.now();
    }
    for (const dir of published()) {
      if (known.has(dir)) continue;
      const folder = join(policies, dir);
      // An empty folder is a publish about to write its ledger: look again at the next poll.
      if (readdirSync(folder).length === 0) continue;
      known.add(dir);
      if (!pids.every(processRuns)) pids = runPids(runDir, NEEDLES.trainer); // restarted since the lookup
      if (pids.length === 0) continue;
      signal("SIGSTOP");
      if (existsSync(join(folder, "manifest.json"))) {
        signal("SIGCONT");
        racesLost += 1;
        continue;
      }
      signal("SIGKILL");
      const killedAt = Date.now();
      const cut = !existsSync(join(runDir, "transport", "objects", "checkpoints", manifestKey(Number(dir.slice(1)))));
      const steps = stepCount(runDir);
      const back = await waitUntil(() => stepCount(runDir) > steps, RECOVERY_LIMIT_MS, done);
      return {
        role: "trainer-publish",
        recoveryMs: back || done() ? Date.now() - killedAt : undefined,
        ...(cut ? { cutVersion: Number(dir.slice(1)) } : {}),
        racesLost,
      };
    }
    await sleep(2);
  }
  return undefined;
}

function stepCount(runDir: string): number {
  const file = join(runDir, "metrics.jsonl");
  if (!existsSync(file)) return 0;
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "").length;
}

/** The newest URL a server role announced in its log (a restarted one announces again, same port). */
function listeningUrl(runDir: string, role: string): string | undefined {
  return logRecords(runDir, role).findLast((r) => r.event === "listening")?.url as string | undefined;
}

function controllerClient(runDir: string): ControllerClient | undefined {
  const url = listeningUrl(runDir, "controller");
  const token = process.env.AGENTRL_CONTROLLER_SECRET;
  if (!url) return undefined;
  return new ControllerClient({ baseUrl: url, maxRetries: 0, ...(token ? { token } : {}) });
}

/** Polls `probe` until true (resolves true), the limit passes or `stop` says so (resolves false). */
async function waitUntil(
  probe: () => boolean | Promise<boolean>,
  limitMs: number,
  stop: () => boolean = () => false,
): Promise<boolean> {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    if (await probe()) return true;
    if (stop()) return false;
    await sleep(POLL_MS);
  }
  return false;
}

/** The invariants read from the finished run's stores, queues and metrics. */
async function checkRun(
  runDir: string,
  maxStaleness: number,
  steps: number,
  problems: string[],
): Promise<Record<string, boolean>> {
  const records = await readMetrics(join(runDir, "metrics.jsonl"));
  const transport = new LocalTransport({
    localDir: join(runDir, "transport"),
    maxReceiveCount: 5,
    visibilityTimeoutSeconds: 10,
  });
  try {
    const checkpoints = transport.store("checkpoints");
    // Every published version is complete (checksums) and loads.
    await initBackend("cpu");
    const versions = [...(await listVersions(checkpoints))].sort((a, b) => a - b);
    let loadable = versions.length > 0;
    for (const version of versions) {
      try {
        (await loadCheckpoint(checkpoints, version)).policy.dispose();
      } catch (error) {
        loadable = false;
        problems.push(`version ${version} does not load: ${(error as Error).message}`);
      }
    }
    const expected = Array.from({ length: steps + 1 }, (_, v) => v);
    if (versions.join() !== expected.join()) problems.push(`versions ${versions.join()} (expected ${expected.join()})`);

    // No trajectory trained twice: each ledger's consumed list is duplicate-free and contains the earlier ones.
    const ledgers = await Promise.all(versions.filter((v) => v > 0).map((v) => readLedger(checkpoints, v)));
    let once = ledgers.every((l) => l !== undefined);
    let previous: string[] = [];
    for (const ledger of ledgers) {
      const consumed = ledger?.consumed ?? [];
      if (new Set(consumed).size !== consumed.length) {
        once = false;
        problems.push(`ledger v${ledger?.version}: a trajectory consumed twice`);
      }
      const now = new Set(consumed);
      if (previous.some((id) => !now.has(id))) {
        once = false;
        problems.push(`ledger v${ledger?.version} lost ids of the one before`);
      }
      previous = consumed;
    }
    const consumed = new Set(previous);

    // None lost: every stored trajectory was consumed, is still queued, or is dead-lettered with a reason.
    const rows = (queue: string) =>
      (transport.database.db.prepare("SELECT body FROM messages WHERE queue = ?").all(queue) as { body: string }[]).map(
        (r) => r.body,
      );
    const dead = (queue: string) =>
      transport.database.db.prepare("SELECT body, reason FROM dead_letters WHERE queue = ?").all(queue) as {
        body: string;
        reason: string;
      }[];
    const pendingTrajectories = new Set(
      rows("trajectories").map((b) => TrajectoryReady.parse(JSON.parse(b)).trajectoryId),
    );
    const pendingGroups = new Set(rows("rollout-requests").map((b) => RolloutRequest.parse(JSON.parse(b)).groupId));
    const deadTrajectories = dead("trajectories");
    const deadRequests = dead("rollout-requests");
    const deadIds = new Set(deadTrajectories.map((d) => TrajectoryReady.parse(JSON.parse(d.body)).trajectoryId));
    const deadGroups = new Set(deadRequests.map((d) => RolloutRequest.parse(JSON.parse(d.body)).groupId));
    const withReasons = [...deadTrajectories, ...deadRequests].every((d) => d.reason.trim() !== "");
    const stored = await storedTrajectories(transport.store("trajectories"));
    const lost = [...stored.values()].filter(
      (t) =>
        !consumed.has(t.trajectoryId) &&
        !pendingTrajectories.has(t.trajectoryId) &&
        !deadIds.has(t.trajectoryId) &&
        !pendingGroups.has(t.groupId) &&
        !deadGroups.has(t.groupId),
    );
    for (const t of lost.slice(0, 5))
      problems.push(`trajectory ${t.trajectoryId} was neither consumed, queued nor dead-lettered`);
    const unknownConsumed = [...consumed].filter((id) => !stored.has(id));
    if (unknownConsumed.length > 0) problems.push(`${unknownConsumed.length} consumed ids have no stored trajectory`);

    // The staleness bound held for every trained token.
    const staleness = records.every((r) => (r.metrics["rollout/staleness_max_plain"] ?? 0) <= maxStaleness);
    if (!staleness) problems.push("a step trained tokens past the staleness bound");

    // The trainer writes a step's metrics line before publishing its version, so every published
    // version has its line whatever the kills (readMetrics keeps the last line of a retrained step).
    const lined = new Set(records.map((r) => r.version));
    const unlined = versions.filter((v) => v > 0 && !lined.has(v));
    if (unlined.length > 0) problems.push(`published version(s) ${unlined.join(", ")} have no metrics line`);
    return {
      "run finished its steps": versions.join() === expected.join(),
      "every published version complete and loadable": loadable && versions.join() === expected.join(),
      "no trajectory trained twice": once,
      "none lost (consumed, queued, or in a DLQ with a reason)":
        lost.length === 0 && withReasons && unknownConsumed.length === 0,
      "staleness bound held": staleness,
      "every published version has its metrics line": unlined.length === 0,
    };
  } finally {
    await transport.close();
  }
}

/** p-th percentile (0..100) of `values` (nearest rank); undefined when empty. */
export function percentile(values: readonly number[], p: number): number | undefined {
  if (values.length === 0) return undefined;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** The report as a text table, then one JSON line with the same figures (the last line). */
export function formatReport(report: ChaosReport): string {
  const lines = ["role               kills  recovery p50 (s)  recovery max (s)"];
  const summary: Record<string, { kills: number; p50s: number | null; maxS: number | null }> = {};
  for (const role of CHAOS_ROLES) {
    const times = report.kills.filter((k) => k.role === role && k.recoveryMs !== undefined).map((k) => k.recoveryMs!);
    const count = report.kills.filter((k) => k.role === role).length;
    const p50 = percentile(times, 50);
    const max = percentile(times, 100);
    summary[role] = {
      kills: count,
      p50s: p50 === undefined ? null : p50 / 1000,
      maxS: max === undefined ? null : max / 1000,
    };
    const show = (ms: number | undefined) => (ms === undefined ? "-" : (ms / 1000).toFixed(1));
    lines.push(`${role.padEnd(18)} ${String(count).padStart(5)}  ${show(p50).padStart(16)}  ${show(max).padStart(16)}`);
  }
  const all = report.kills.filter((k) => k.recoveryMs !== undefined).map((k) => k.recoveryMs!);
  lines.push(
    `all                ${String(report.kills.length).padStart(5)}  ${((percentile(all, 50) ?? 0) / 1000).toFixed(1).padStart(16)}  ${((percentile(all, 100) ?? 0) / 1000).toFixed(1).padStart(16)}`,
  );
  lines.push(`steps completed: ${report.steps} of ${report.stepsRequired}`);
  for (const [name, held] of Object.entries(report.invariants)) lines.push(`${held ? "held  " : "BROKEN"} ${name}`);
  for (const problem of report.problems) lines.push(`problem: ${problem}`);
  lines.push(`wall ${report.wallSeconds.toFixed(0)} s, load average ${report.loadAverage.join(" ")}`);
  lines.push(
    JSON.stringify({
      kills: summary,
      recoveryP50s: (percentile(all, 50) ?? 0) / 1000,
      recoveryMaxS: (percentile(all, 100) ?? 0) / 1000,
      steps: report.steps,
      stepsRequired: report.stepsRequired,
      invariantsHeld: Object.values(report.invariants).every(Boolean),
      invariants: report.invariants,
      wallSeconds: Math.round(report.wallSeconds),
      loadAverage: report.loadAverage,
    }),
  );
  return lines.join("\n");
}
