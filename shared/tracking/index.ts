import { join } from "node:path";
import { KEY_PREFIXES } from "../config/roleAccess.ts";
import type { TrackingConfig } from "../config/tracking.ts";
import type { ObjectStore } from "../transport/types.ts";
import { readTrackerLinks, writeTrackerLinks } from "./links.ts";
import { MlflowSink, mlflowCredentialsFromEnv } from "./mlflow.ts";
import { StoreTensorBoardSink, TensorBoardSink } from "./tensorboard.ts";
import { FanOutTracker, QueuedTracker, type Tracker, type TrackerSink } from "./tracker.ts";
import { WANDB_DEFAULT_BASE_URL, WandbSink } from "./wandb.ts";

export * from "./links.ts";
export type { RunStatus, Tracker } from "./tracker.ts";

export interface OpenTrackersOptions {
  /** The run folder (beside metrics.jsonl): TensorBoard's default folder and trackers.json. */
  readonly runFolder: string;
  /** The run's name in trackers that have one: the experiment id. */
  readonly runName: string;
  /** Where credentials are read from (process.env in the trainer). */
  readonly env: NodeJS.ProcessEnv;
  readonly warn: (message: string) => void;
  readonly fetch?: typeof fetch;
  /**
   * The trajectory store, on the AWS transport: TensorBoard's files then go to its
   * `tensorboard/<experimentId>/` prefix (read as s3://), unless `tracking.tensorboard.dir` names a folder.
   */
  readonly tensorboardStore?: Pick<ObjectStore, "put">;
}

/** Where TensorBoard's files go in the trajectory store. */
export function tensorboardPrefix(experimentId: string): string {
  return `${KEY_PREFIXES.tensorboard}${experimentId}/`;
}

/**
 * Every tracker `config` turns on, behind one queue each, as one Tracker.
 * @example const tracker = openTrackers(config.tracking, { runFolder, runName: config.experimentId, env: process.env, warn });
 */
export function openTrackers(config: TrackingConfig, options: OpenTrackersOptions): Tracker {
  const sinks: TrackerSink[] = [];
  if (config.tensorboard.enabled)
    sinks.push(
      options.tensorboardStore && config.tensorboard.dir === undefined
        ? new StoreTensorBoardSink(options.tensorboardStore, tensorboardPrefix(options.runName))
        : new TensorBoardSink(config.tensorboard.dir ?? join(options.runFolder, "tensorboard")),
    );
  if (config.mlflow) {
    const { trackingUri, experiment } = config.mlflow;
    const earlier = readTrackerLinks(options.runFolder).mlflow;
    const credentials = mlflowCredentialsFromEnv(options.env);
    sinks.push(
      new MlflowSink({
        trackingUri,
        experiment,
        runName: options.runName,
        ...(credentials ? { credentials } : {}),
        ...(earlier?.trackingUri === trackingUri ? { resumeRunId: earlier.runId } : {}),
        ...(options.fetch ? { fetch: options.fetch } : {}),
        onRun: (run) =>
          writeTrackerLinks(options.runFolder, {
            ...readTrackerLinks(options.runFolder),
            mlflow: { trackingUri, ...run },
          }),
      }),
    );
  }
  if (config.wandb) {
    const { project, entity } = config.wandb;
    const baseUrl = config.wandb.baseUrl ?? options.env.WANDB_BASE_URL ?? WANDB_DEFAULT_BASE_URL;
    const earlier = readTrackerLinks(options.runFolder).wandb;
    const same = earlier?.baseUrl === baseUrl.replace(/\/+$/, "") && earlier.project === project;
    sinks.push(
      new WandbSink({
        baseUrl,
        project,
        ...(entity ? { entity } : {}),
        apiKey: options.env.WANDB_API_KEY,
        displayName: options.runName,
        ...(same ? { resumeRunId: earlier.runId } : {}),
        ...(options.fetch ? { fetch: options.fetch } : {}),
        onRun: (run) => writeTrackerLinks(options.runFolder, { ...readTrackerLinks(options.runFolder), wandb: run }),
      }),
    );
  }
  const queue = {
    queueLimit: config.queueLimit,
    retries: config.retries,
    retryBaseSeconds: config.retryBaseSeconds,
    finishSeconds: config.finishSeconds,
    warn: options.warn,
  };
  return new FanOutTracker(sinks.map((sink) => new QueuedTracker(sink, queue)));
}

/**
 * A config as flat `path: value` params (`policy.model.dModel: "128"`, arrays by index:
 * `tasks.mix.0.name`), as trackers want hyper-parameters.
 */
export function flattenParams(value: unknown, prefix = ""): Record<string, string> {
  if (value === undefined) return {};
  if (value === null || typeof value !== "object") return { [prefix]: String(value) };
  const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v] as const) : Object.entries(value);
  if (entries.length === 0) return { [prefix]: Array.isArray(value) ? "[]" : "{}" };
  return Object.assign({}, ...entries.map(([key, v]) => flattenParams(v, prefix ? `${prefix}.${key}` : key)));
}
