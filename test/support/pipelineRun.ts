import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { parseJsonOrThrow } from "../../shared/errors.ts";
import { Trajectory } from "../../shared/protocol/messages.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";
import { agentrl } from "./cli.ts";
import { processIdsNaming } from "./processes.ts";

/**
 * Setup shared by the chaos run (bench/chaos.ts, test/e2e/chaos.test.ts) and the tests that read
 * a finished run: a tiny experiment, its warm-up checkpoint, and ways to find and read the run's
 * role processes and stored trajectories.
 * No vitest import, so the chaos script can use it outside the suite.
 */

/** A model small enough that a run is about the pipeline, not about arithmetic speed. */
export const TINY_MODEL = {
  vocabSize: 400,
  dModel: 32,
  layers: 1,
  heads: 2,
  kvHeads: 1,
  ffnHidden: 64,
  contextLength: 2048,
};

/** The tiny two-task (db, kg) experiment: one rollout worker, batches of 2 groups of 2, staleness bound 1. */
export function tinyConfig(
  experimentId: string,
  options: {
    transport?: Record<string, unknown>;
    maxSteps: number;
    evaluation?: Record<string, unknown>;
    model?: Record<string, number>;
  },
): ExperimentConfig {
  return parseConfig({
    experimentId,
    transport: options.transport ?? {},
    policy: { model: options.model ?? TINY_MODEL },
    tasks: {
      mix: [
        { name: "db", concurrency: 8 },
        { name: "kg", concurrency: 8 },
      ],
    },
    rollout: { groupSize: 2, maxTokensPerTurn: 24, maxTurns: 3, workers: 1, concurrency: 4 },
    trainer: { batchSize: 2, maxSteps: options.maxSteps, warmupFactor: 1, maxStaleness: 1 },
    evaluation: options.evaluation ?? { instances: 0 },
  });
}

/**
 * Writes the tiny model's warm-up checkpoint (a short `agentrl sft`) to `dir`, which must be a
 * folder inside a temp dir (the store stages writes in a sibling `<dir>.tmp`, which a killed
 * `sft` leaves behind). Throws if a finished one left the sibling too.
 */
export async function buildTinyBase(dir: string, timeoutMs = 230_000): Promise<void> {
  const sets = Object.entries(TINY_MODEL).flatMap(([k, v]) => ["--set", `policy.model.${k}=${v}`]);
  const sft = await agentrl(["sft", "--out", dir, "--tasks", "db", "kg", "--episodes", "3", "--steps", "2", ...sets], {
    timeoutMs,
  });
  if (sft.status !== 0) throw new Error(`agentrl sft failed (${sft.status}): ${sft.stderr}`);
  if (existsSync(`${dir}.tmp`)) throw new Error(`agentrl sft --out ${dir} left ${dir}.tmp behind`);
}

/** The JSON log lines of one role of the run in `runDir`. */
export function logRecords(runDir: string, role: string): Array<Record<string, unknown>> {
  const file = join(runDir, "logs", `${role}.log`);
  if (!existsSync(file)) return [];
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => {
      try {
        return JSON.parse(line) as Record<string, unknown>;
      } catch {
        return {}; // a line cut by a SIGKILL
      }
    });
}

/** Sends `name` to each of `pids`, passing over one that has already exited (a restart in between). */
export function signalPids(pids: readonly number[], name: NodeJS.Signals): void {
  for (const pid of pids)
    try {
      process.kill(pid, name);
    } catch {
      // gone already
    }
}

/**
 * PIDs of the role processes of the run in `runDir` whose command line contains `needle`. A run's
 * processes are told apart by its folder, which each names (`--config <runDir>/config.json`, an env
 * worker's state file), not by being this process's descendants: test files that share a worker
 * thread share its process, and another file's runs are descendants of it too.
 */
export function runPids(runDir: string, needle: string): number[] {
  return processIdsNaming(`${resolve(runDir)}/`, needle).filter((pid) => pid !== process.pid);
}

/** Every stored trajectory of the store, by id. */
export async function storedTrajectories(store: ObjectStore): Promise<Map<string, Trajectory>> {
  const out = new Map<string, Trajectory>();
  for (const object of await store.list("trajectories/")) {
    const trajectory = parseJsonOrThrow(Trajectory, (await store.getText(object.key)) ?? "", object.key);
    out.set(trajectory.trajectoryId, trajectory);
  }
  return out;
}
