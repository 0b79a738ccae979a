import { z } from "zod";
import { httpFailure, jsonOrUndefined, type RunStatus, type TrackerRecord, type TrackerSink } from "./tracker.ts";

/**
 * MLflow over its REST API (`/api/2.0/mlflow/...`), no client library: the experiment by name
 * (created when missing), one run per experiment id, `runs/log-batch` for params, tags and
 * metrics, `runs/update` with the run's status at the end.
 *
 * log-batch limits are MLflow's documented ones (REST API, "Log Batch": at most 1000 metrics,
 * 100 params, 100 tags, 1000 entities in all and 1 MB per request); value limits are those of
 * mlflow/utils/validation.py: keys 250 characters, param values 6000, tag values 8000 (servers
 * before MLflow 2.x allowed less; a value the server rejects is dropped and counted, not retried).
 */
export const MLFLOW_LIMITS = {
  metricsPerBatch: 1000,
  paramsPerBatch: 100,
  tagsPerBatch: 100,
  entitiesPerBatch: 1000,
  /** 1 MB per request, with room for the envelope. */
  batchBytes: 1_000_000 - 4_096,
  keyLength: 250,
  paramValueLength: 6000,
  tagValueLength: 8000,
} as const;

/** Credentials, only ever from the environment: `MLFLOW_TRACKING_TOKEN`, or `MLFLOW_TRACKING_USERNAME` + `_PASSWORD`. */
export type MlflowCredentials = { readonly token: string } | { readonly username: string; readonly password: string };

/** The credentials MLflow's own clients read, from `env`; undefined when none are set. */
export function mlflowCredentialsFromEnv(env: NodeJS.ProcessEnv): MlflowCredentials | undefined {
  if (env.MLFLOW_TRACKING_TOKEN) return { token: env.MLFLOW_TRACKING_TOKEN };
  if (env.MLFLOW_TRACKING_USERNAME && env.MLFLOW_TRACKING_PASSWORD)
    return { username: env.MLFLOW_TRACKING_USERNAME, password: env.MLFLOW_TRACKING_PASSWORD };
  return undefined;
}

export interface MlflowSinkOptions {
  readonly trackingUri: string;
  readonly experiment: string;
  /** The run's name: the experiment id of this config. */
  readonly runName: string;
  readonly credentials?: MlflowCredentials;
  /** A run made by an earlier trainer process of this run (its run id), continued instead of a new one. */
  readonly resumeRunId?: string;
  /** Told the run once it exists (the trainer writes it beside metrics.jsonl for the viewer and restarts). */
  readonly onRun?: (run: { readonly runId: string; readonly experimentId: string; readonly url: string }) => void;
  readonly requestTimeoutMs?: number;
  readonly fetch?: typeof fetch;
  readonly now?: () => number;
}

const KeyValue = z.object({ key: z.string(), value: z.string() });
type KeyValue = z.infer<typeof KeyValue>;
interface Metric {
  readonly key: string;
  readonly value: number;
  readonly timestamp: number;
  readonly step: number;
}
const GetExperimentResponse = z.object({ experiment: z.object({ experiment_id: z.string() }) });
const CreateExperimentResponse = z.object({ experiment_id: z.string() });
const CreateRunResponse = z.object({ run: z.object({ info: z.object({ run_id: z.string() }) }) });
const ErrorBody = z.object({ error_code: z.string(), message: z.string().optional() }).partial();

/** MLflow names allow alphanumerics, `_ - . / ` and spaces; anything else becomes `_`. */
export function mlflowKey(key: string): string {
  return key.replace(/[^\w\-./ ]/g, "_").slice(0, MLFLOW_LIMITS.keyLength);
}

function clip(value: string, limit: number): string {
  return value.length <= limit ? value : `${value.slice(0, limit - 1)}…`;
}

/** A log-batch body within every limit. */
export interface LogBatch {
  readonly metrics: Metric[];
  readonly params: KeyValue[];
  readonly tags: KeyValue[];
}

/** Splits params, tags and metrics into log-batch bodies that each stay within MLFLOW_LIMITS. */
export function logBatches(
  params: readonly KeyValue[],
  tags: readonly KeyValue[],
  metrics: readonly Metric[],
): LogBatch[] {
  const out: LogBatch[] = [];
  let current: LogBatch = { metrics: [], params: [], tags: [] };
  let bytes = 0;
  const add = (list: "metrics" | "params" | "tags", item: Metric | KeyValue, limit: number): void => {
    const size = JSON.stringify(item).length + 1;
    const entities = current.metrics.length + current.params.length + current.tags.length;
    if (
      current[list].length >= limit ||
      entities >= MLFLOW_LIMITS.entitiesPerBatch ||
      bytes + size > MLFLOW_LIMITS.batchBytes
    ) {
      out.push(current);
      current = { metrics: [], params: [], tags: [] };
      bytes = 0;
    }
    (current[list] as Array<Metric | KeyValue>).push(item);
    bytes += size;
  };
  for (const p of params) add("params", p, MLFLOW_LIMITS.paramsPerBatch);
  for (const t of tags) add("tags", t, MLFLOW_LIMITS.tagsPerBatch);
  for (const m of metrics) add("metrics", m, MLFLOW_LIMITS.metricsPerBatch);
  if (current.metrics.length + current.params.length + current.tags.length > 0) out.push(current);
  return out;
}

/** The records' params, tags and metrics as log-batch bodies (histograms and texts have no MLflow place). */
export function recordsToBatches(records: readonly TrackerRecord[]): LogBatch[] {
  const params: KeyValue[] = [];
  const tags: KeyValue[] = [];
  const metrics: Metric[] = [];
  for (const record of records) {
    if (record.kind === "params") {
      for (const [key, value] of Object.entries(record.params))
        params.push({ key: mlflowKey(key), value: clip(value, MLFLOW_LIMITS.paramValueLength) });
      for (const [key, value] of Object.entries(record.tags))
        tags.push({ key: mlflowKey(key), value: clip(value, MLFLOW_LIMITS.tagValueLength) });
    } else if (record.kind === "scalars") {
      // JSON has no NaN or Infinity; metrics.jsonl keeps them
      for (const [key, value] of Object.entries(record.values))
        if (Number.isFinite(value))
          metrics.push({ key: mlflowKey(key), value, timestamp: Math.round(record.wallTime), step: record.step });
    }
  }
  return logBatches(params, tags, metrics);
}

/**
 * The MLflow sink.
 * @example new MlflowSink({ trackingUri: "http://mlflow:5000", experiment: "agentrl", runName: config.experimentId, credentials: mlflowCredentialsFromEnv(process.env) })
 */
export class MlflowSink implements TrackerSink {
  readonly name = "mlflow";
  private run: { runId: string; experimentId: string } | undefined;
  /** log-batch bodies of a record batch already sent, so a retry after a partial failure resends none twice. */
  private readonly sent = new WeakMap<readonly TrackerRecord[], number>();
  private readonly base: string;

  constructor(private readonly options: MlflowSinkOptions) {
    this.base = options.trackingUri.replace(/\/+$/, "");
  }

  link(): string | undefined {
    return this.run ? runUrl(this.base, this.run.experimentId, this.run.runId) : undefined;
  }

  async write(records: readonly TrackerRecord[]): Promise<void> {
    const run = await this.ensureRun();
    const batches = recordsToBatches(records);
    for (let i = this.sent.get(records) ?? 0; i < batches.length; i += 1) {
      await this.call("runs/log-batch", { run_id: run.runId, ...batches[i] });
      this.sent.set(records, i + 1);
    }
  }

  async finish(status: RunStatus): Promise<void> {
    if (!this.run) return; // nothing was ever written: no run to end
    await this.call("runs/update", { run_id: this.run.runId, status, end_time: (this.options.now ?? Date.now)() });
  }

  private async ensureRun(): Promise<{ runId: string; experimentId: string }> {
    if (this.run) return this.run;
    const experimentId = await this.experimentId();
    let runId = this.options.resumeRunId;
    // a run id from an earlier process that the server no longer knows: start a new run
    if (
      runId &&
      (await this.call("runs/update", { run_id: runId, status: "RUNNING" }, ["RESOURCE_DOES_NOT_EXIST"])) === undefined
    )
      runId = undefined;
    if (!runId) {
      const created = CreateRunResponse.parse(
        await this.call("runs/create", {
          experiment_id: experimentId,
          run_name: this.options.runName,
          start_time: (this.options.now ?? Date.now)(),
          tags: [{ key: "mlflow.runName", value: this.options.runName }],
        }),
      );
      runId = created.run.info.run_id;
    }
    this.run = { runId, experimentId };
    this.options.onRun?.({ runId, experimentId, url: runUrl(this.base, experimentId, runId) });
    return this.run;
  }

  private async experimentId(): Promise<string> {
    const name = this.options.experiment;
    const found = await this.call(`experiments/get-by-name?experiment_name=${encodeURIComponent(name)}`, undefined, [
      "RESOURCE_DOES_NOT_EXIST",
    ]);
    if (found !== undefined) return GetExperimentResponse.parse(found).experiment.experiment_id;
    const created = await this.call("experiments/create", { name }, ["RESOURCE_ALREADY_EXISTS"]);
    if (created !== undefined) return CreateExperimentResponse.parse(created).experiment_id;
    // another trainer created it between our get and create
    return this.experimentId();
  }

  /**
   * One API call; a body of `undefined` makes it a GET. Answers with the JSON body, or undefined
   * when the server answered one of `expected` error codes.
   */
  private async call(path: string, body: unknown, expected: readonly string[] = []): Promise<unknown> {
    const headers: Record<string, string> = { "content-type": "application/json" };
    const credentials = this.options.credentials;
    if (credentials && "token" in credentials) headers.authorization = `Bearer ${credentials.token}`;
    else if (credentials)
      headers.authorization = `Basic ${Buffer.from(`${credentials.username}:${credentials.password}`).toString("base64")}`;
    const response = await (this.options.fetch ?? fetch)(`${this.base}/api/2.0/mlflow/${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers,
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(this.options.requestTimeoutMs ?? 10_000),
    });
    const text = await response.text();
    if (response.ok) return text ? JSON.parse(text) : {};
    const error = ErrorBody.safeParse(jsonOrUndefined(text));
    const code = error.success ? error.data.error_code : undefined;
    if (code && expected.includes(code)) return undefined;
    const message = `MLflow ${path.split("?")[0]} answered HTTP ${response.status}${code ? ` ${code}` : ""}: ${(error.success && error.data.message) || text.slice(0, 300)}`;
    throw httpFailure(response.status, message);
  }
}

/** MLflow UI's page of a run. */
export function runUrl(trackingUri: string, experimentId: string, runId: string): string {
  return `${trackingUri.replace(/\/+$/, "")}/#/experiments/${experimentId}/runs/${runId}`;
}
