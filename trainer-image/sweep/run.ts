import { spawn } from "node:child_process";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join, relative } from "node:path";
import type { GridPoint, SweepSpec } from "../../shared/config/sweep.ts";
import { expandGrid } from "../../shared/config/sweep.ts";

/** Runs one experiment from its config file; resolves with the process exit code (0 = success). */
export type ExperimentRunner = (point: GridPoint, configFile: string) => Promise<number>;

/**
 * A runner that spawns `argv[0] ...argv[1..] --config <file>` and waits for it, its output going
 * to this process's stdout/stderr.
 * @example commandRunner([process.execPath, "bin/agentrl.mjs", "train"])
 */
export function commandRunner(argv: readonly string[], env: NodeJS.ProcessEnv = process.env): ExperimentRunner {
  const [command, ...args] = argv;
  if (command === undefined) throw new Error("commandRunner needs a command");
  return (_point, configFile) =>
    new Promise((resolve, reject) => {
      const child = spawn(command, [...args, "--config", configFile], { stdio: "inherit", env });
      child.once("error", reject);
      child.once("exit", (code, signal) => resolve(code ?? (signal ? 128 : 1)));
    });
}

/** Copies a finished point's files somewhere durable (S3 in AWS); keys are relative to `dir`. */
export type ResultUploader = (point: GridPoint, dir: string, files: readonly string[]) => Promise<void>;

/** Outcome of one grid point. */
export interface PointResult {
  readonly point: GridPoint;
  readonly configFile: string;
  readonly runDir: string;
  readonly exitCode: number;
  readonly durationMs: number;
}

/** Options of {@link runSweep}. */
export interface RunSweepOptions {
  readonly runner: ExperimentRunner;
  /** Folder of the points' config files and run folders (`<workDir>/<point id>/`). */
  readonly workDir: string;
  /** Stop after the first failed point instead of running the rest. @default false */
  readonly failFast?: boolean;
  readonly upload?: ResultUploader;
  /** Called before and after each point (progress lines). */
  readonly onEvent?: (event: { kind: "start" | "done"; point: GridPoint; total: number; exitCode?: number }) => void;
}

async function listFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true, recursive: true });
  return entries
    .filter((entry) => entry.isFile())
    .map((entry) => relative(dir, join(entry.parentPath, entry.name)))
    .sort();
}

/**
 * Runs every grid point of `spec`, one after another: writes `<workDir>/<id>/config.json` (the
 * point's validated config, its runDir pointing into that folder), runs it with `runner`, then
 * uploads the folder when an uploader is given. Grid errors throw before anything runs.
 */
export async function runSweep(spec: SweepSpec, options: RunSweepOptions): Promise<PointResult[]> {
  const points = expandGrid(spec);
  const results: PointResult[] = [];
  for (const point of points) {
    const dir = join(options.workDir, point.id);
    const runDir = join(dir, "runs");
    await mkdir(runDir, { recursive: true });
    const configFile = join(dir, "config.json");
    await writeFile(configFile, `${JSON.stringify({ ...point.config, runDir }, null, 2)}\n`);
    options.onEvent?.({ kind: "start", point, total: points.length });
    const started = Date.now();
    const exitCode = await options.runner(point, configFile);
    const durationMs = Date.now() - started;
    await writeFile(
      join(dir, "result.json"),
      `${JSON.stringify({ id: point.id, assignments: point.assignments, exitCode, durationMs }, null, 2)}\n`,
    );
    if (options.upload) await options.upload(point, dir, await listFiles(dir));
    options.onEvent?.({ kind: "done", point, total: points.length, exitCode });
    results.push({ point, configFile, runDir, exitCode, durationMs });
    if (exitCode !== 0 && options.failFast) break;
  }
  return results;
}

/**
 * Uploads each point's folder to `s3://bucket/sweeps/<sweep>/<point>/...` (the deployed sweep
 * runner's results). The S3 client is loaded lazily so local sweeps never load the SDK.
 */
export function s3Uploader(
  spec: SweepSpec,
  target: { bucket: string; region?: string; endpoint?: string },
): ResultUploader {
  return async (point, dir, files) => {
    const { S3Client, PutObjectCommand } = await import("@aws-sdk/client-s3");
    const client = new S3Client({
      ...(target.region ? { region: target.region } : {}),
      ...(target.endpoint ? { endpoint: target.endpoint, forcePathStyle: true } : {}),
    });
    try {
      for (const file of files)
        await client.send(
          new PutObjectCommand({
            Bucket: target.bucket,
            Key: `sweeps/${spec.name}/${point.id}/${file.split("\\").join("/")}`,
            Body: await readFile(join(dir, file)),
          }),
        );
    } finally {
      client.destroy();
    }
  };
}
