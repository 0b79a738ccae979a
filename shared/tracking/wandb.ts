import { randomBytes } from "node:crypto";
import { z } from "zod";
import {
  httpFailure,
  jsonOrUndefined,
  type RunStatus,
  type TrackerRecord,
  TrackerRejectedError,
  type TrackerSink,
} from "./tracker.ts";

/**
 * Weights & Biases over its HTTP API, as W&B's own clients speak it (no client library): GraphQL
 * `upsertBucket` at `<base>/graphql` makes or continues the run (by its id) and sets its config
 * and commit; `<base>/files/<entity>/<project>/<run>/file_stream` appends history lines
 * (`wandb-history.jsonl`, one JSON object per step with `_step`, `_timestamp`, `_runtime`),
 * replaces the summary (`wandb-summary.json`) and, at the end, marks the run complete with its
 * exit code. Authentication is HTTP Basic `api:<WANDB_API_KEY>`.
 *
 * Limits: a file_stream request of about 10 MiB and a history line of 10 MiB - 100 KiB (what the
 * wandb client's filestream holds itself to: core/internal/filestream/filestream.go), a logged
 * value under 1 MB (W&B docs, "Limits & performance"), histograms of 64 bins (wandb.Histogram's
 * default; at most 512). W&B takes history steps in increasing order only, so the rows of one
 * step are merged, the newest step's row is held until a later step or the end of the run, and
 * values for a step already sent go to the run's summary.
 */
export const WANDB_LIMITS = {
  /** One file_stream request, with room for the envelope. */
  requestBytes: (10 << 20) - 16_384,
  lineBytes: (10 << 20) - (100 << 10),
  valueBytes: 1_000_000,
  histogramBins: 64,
} as const;

export const WANDB_DEFAULT_BASE_URL = "https://api.wandb.ai";

export interface WandbSinkOptions {
  /** W&B's API host: https://api.wandb.ai, or a dedicated or self-hosted server. */
  readonly baseUrl: string;
  readonly project: string;
  /** @default - the API key's default entity, as the server answers it */
  readonly entity?: string;
  /** From WANDB_API_KEY only; without one every write is rejected (dropped, counted, warned once). */
  readonly apiKey: string | undefined;
  /** The run's name in the UI: the experiment id. */
  readonly displayName: string;
  /** A run of an earlier trainer process of this run, continued instead of a new one. */
  readonly resumeRunId?: string;
  /** Told the run once it exists (written beside metrics.jsonl for the viewer and restarts). */
  readonly onRun?: (run: WandbRun) => void;
  readonly requestTimeoutMs?: number;
  readonly fetch?: typeof fetch;
  readonly now?: () => number;
}

export interface WandbRun {
  readonly baseUrl: string;
  readonly entity: string;
  readonly project: string;
  readonly runId: string;
  readonly url: string;
}

const UPSERT_BUCKET = `mutation UpsertBucket($name: String, $project: String, $entity: String, $displayName: String, $config: JSONString, $commit: String) {
  upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, displayName: $displayName, config: $config, commit: $commit}) {
    bucket { id name historyLineCount summaryMetrics project { name entity { name } } }
    inserted
  }
}`;

const UpsertBucketResponse = z.object({
  data: z.object({
    upsertBucket: z.object({
      bucket: z.object({
        name: z.string(),
        historyLineCount: z.number().int().nonnegative().nullish(),
        summaryMetrics: z.string().nullish(),
        project: z.object({ name: z.string(), entity: z.object({ name: z.string() }) }),
      }),
    }),
  }),
});
const GraphqlErrors = z.object({ errors: z.array(z.object({ message: z.string() })).min(1) });

/** History keys: W&B reserves a leading `_` for its own (`_step`, `_runtime`); ours never start with one. */
export function wandbKey(key: string): string {
  const cleaned = key.replace(/[^\w\-./]/g, "_");
  return cleaned.startsWith("_") ? `u${cleaned}` : cleaned;
}

/** A run id as W&B's clients make them: 8 characters of [a-z0-9]. */
export function newRunId(): string {
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  return [...randomBytes(8)].map((b) => alphabet[b % alphabet.length]).join("");
}

/** W&B's histogram value: `bins` edges around `values` counts (numpy.histogram's layout). */
export function wandbHistogram(
  values: readonly number[],
  bins: number = WANDB_LIMITS.histogramBins,
): { _type: "histogram"; bins: number[]; values: number[] } | undefined {
  const finite = values.filter(Number.isFinite);
  if (finite.length === 0) return undefined;
  let low = Math.min(...finite);
  let high = Math.max(...finite);
  // numpy widens an empty range by 0.5 each side
  if (low === high) [low, high] = [low - 0.5, high + 0.5];
  const width = (high - low) / bins;
  const counts = new Array<number>(bins).fill(0);
  for (const v of finite) counts[Math.min(bins - 1, Math.floor((v - low) / width))]! += 1;
  return { _type: "histogram", bins: Array.from({ length: bins + 1 }, (_, i) => low + i * width), values: counts };
}

/** W&B's config: one entry per top-level key, `{value, desc}`, the flattened params nested again. */
export function wandbConfig(params: Readonly<Record<string, string>>): Record<string, { value: unknown; desc: null }> {
  const nested: Record<string, unknown> = {};
  for (const [path, value] of Object.entries(params)) {
    const parts = path.split(".");
    let node = nested;
    for (const part of parts.slice(0, -1)) {
      const next = node[part];
      node[part] = typeof next === "object" && next !== null ? next : {};
      node = node[part] as Record<string, unknown>;
    }
    node[parts.at(-1) ?? path] = value;
  }
  return Object.fromEntries(Object.entries(nested).map(([key, value]) => [key, { value, desc: null }]));
}

/** Consecutive lines in requests of at most `limit` bytes (a line alone may reach it). */
export function fileStreamChunks(lines: readonly string[], limit: number = WANDB_LIMITS.requestBytes): string[][] {
  const chunks: string[][] = [];
  let current: string[] = [];
  let bytes = 0;
  for (const line of lines) {
    const size = Buffer.byteLength(line) + 4;
    if (current.length > 0 && bytes + size > limit) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(line);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

function clip(text: string, bytes: number): string {
  return Buffer.byteLength(text) <= bytes
    ? text
    : `${Buffer.from(text)
        .subarray(0, bytes - 4)
        .toString("utf8")}…`;
}

/** The commit among the run's tags (`mlflow.source.git.commit` from the trainer, or any `*git.commit`). */
function commitOf(tags: Readonly<Record<string, string>>): string | undefined {
  return Object.entries(tags).find(([key]) => key.endsWith("git.commit"))?.[1];
}

/** One row waiting for its step to end. */
interface Row {
  readonly step: number;
  readonly wallTime: number;
  readonly values: Record<string, unknown>;
}

/**
 * What one batch of records becomes, made from the sink's state without changing it: the state
 * moves on only once the batch is written, so a retry resends what is unanswered and a batch
 * given up (or split record by record after a rejection) leaves the state as it was.
 */
interface Staged {
  readonly records: readonly TrackerRecord[];
  readonly upserts: ReadonlyArray<Record<string, string>>;
  readonly lines: ReadonlyArray<{ readonly line: string; readonly step: number }>;
  readonly pending: Row | undefined;
  readonly lastStep: number;
  readonly summary: Record<string, unknown>;
  readonly summaryChanged: boolean;
  readonly skipped: number;
  /** How much of it the server already has. */
  sentUpserts: number;
  sentLines: number;
}

/**
 * The W&B sink.
 * @example new WandbSink({ baseUrl: "https://api.wandb.ai", project: "agentrl", apiKey: process.env.WANDB_API_KEY, displayName: config.experimentId })
 */
export class WandbSink implements TrackerSink {
  readonly name = "wandb";
  private run: WandbRun | undefined;
  private readonly runId: string;
  private readonly base: string;
  private readonly startedAt: number;
  /** Lines of the history file the server holds (the next line's offset). */
  private historyOffset = 0;
  /** The newest step the server holds: a row for it or an earlier step is not sent again. */
  private lastStep = -1;
  /** The newest step's row, held until a later step arrives or the run ends. */
  private pending: Row | undefined;
  private summary: Record<string, unknown> = {};
  private staged: Staged | undefined;
  /** Records for steps the server already held, sent to the summary instead of the history. */
  skippedRows = 0;

  constructor(private readonly options: WandbSinkOptions) {
    this.base = options.baseUrl.replace(/\/+$/, "");
    this.runId = options.resumeRunId ?? newRunId();
    this.startedAt = this.now();
  }

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  link(): string | undefined {
    return this.run?.url;
  }

  async write(records: readonly TrackerRecord[]): Promise<void> {
    const run = await this.ensureRun();
    if (this.staged?.records !== records) this.staged = this.stage(records, false);
    await this.send(run, this.staged);
  }

  async finish(status: RunStatus): Promise<void> {
    if (!this.run) return; // nothing was ever written: no run to end
    await this.send(this.run, this.stage([], true), status === "FINISHED" ? 0 : 1);
  }

  /** The batch as upserts, history lines and the summary after it (see {@link Staged}). */
  private stage(records: readonly TrackerRecord[], end: boolean): Staged {
    const upserts: Array<Record<string, string>> = [];
    const lines: Array<{ line: string; step: number }> = [];
    const summary = { ...this.summary };
    let pending = this.pending ? { ...this.pending, values: { ...this.pending.values } } : undefined;
    let lastStep = this.lastStep;
    let summaryChanged = false;
    let skipped = 0;
    const emit = () => {
      if (!pending) return;
      const line = JSON.stringify({
        ...pending.values,
        _step: pending.step,
        _timestamp: pending.wallTime / 1000,
        _runtime: Math.max(0, (pending.wallTime - this.startedAt) / 1000),
      });
      if (Buffer.byteLength(line) > WANDB_LIMITS.lineBytes)
        throw new TrackerRejectedError(
          `wandb: step ${pending.step}'s row is ${line.length} bytes, over W&B's line limit`,
        );
      lines.push({ line, step: pending.step });
      Object.assign(summary, pending.values, { _step: pending.step });
      summaryChanged = true;
      lastStep = pending.step;
      pending = undefined;
    };
    const addToRow = (step: number, wallTime: number, values: Record<string, unknown>) => {
      // W&B takes history steps in increasing order only: a row for a step it holds (the closing
      // evaluation at the last trainer step, a restarted trainer's repeated steps) goes to the
      // run's summary instead
      if (step <= lastStep || (pending && step < pending.step)) {
        Object.assign(summary, values);
        summaryChanged = true;
        skipped += 1;
        return;
      }
      if (pending && step > pending.step) emit();
      pending ??= { step, wallTime, values: {} };
      Object.assign(pending.values, values);
    };
    for (const record of records) {
      if (record.kind === "params") {
        const commit = commitOf(record.tags);
        upserts.push({ config: JSON.stringify(wandbConfig(record.params)), ...(commit ? { commit } : {}) });
      } else if (record.kind === "text") {
        // W&B has no text panel without a file upload: the run's summary shows it
        summary[wandbKey(record.tag)] = clip(record.markdown, WANDB_LIMITS.valueBytes);
        summaryChanged = true;
      } else if (record.kind === "scalars") {
        // JSON has no NaN or Infinity; metrics.jsonl keeps them
        const finite = Object.entries(record.values).filter(([, v]) => Number.isFinite(v));
        addToRow(record.step, record.wallTime, Object.fromEntries(finite.map(([k, v]) => [wandbKey(k), v])));
      } else {
        const histogram = wandbHistogram(record.values);
        if (histogram) addToRow(record.step, record.wallTime, { [wandbKey(record.tag)]: histogram });
      }
    }
    if (end) emit();
    return {
      records,
      upserts,
      lines,
      pending,
      lastStep,
      summary,
      summaryChanged,
      skipped,
      sentUpserts: 0,
      sentLines: 0,
    };
  }

  /** Sends what of `staged` the server lacks, in requests within W&B's size; `exitcode` marks the end. */
  private async send(run: WandbRun, staged: Staged, exitcode?: number): Promise<void> {
    for (; staged.sentUpserts < staged.upserts.length; staged.sentUpserts += 1)
      await this.upsert({
        name: run.runId,
        project: run.project,
        entity: run.entity,
        ...staged.upserts[staged.sentUpserts],
      });
    const path = ["files", run.entity, run.project, run.runId].map(encodeURIComponent).join("/");
    const rest = staged.lines.slice(staged.sentLines);
    const chunks = fileStreamChunks(rest.map((l) => l.line));
    if (chunks.length === 0 && (staged.summaryChanged || exitcode !== undefined)) chunks.push([]);
    for (const [i, chunk] of chunks.entries()) {
      const last = i === chunks.length - 1;
      const files: Record<string, { offset: number; content: string[] }> = {};
      if (chunk.length > 0) files["wandb-history.jsonl"] = { offset: this.historyOffset, content: chunk };
      if (last && staged.summaryChanged)
        files["wandb-summary.json"] = {
          offset: 0,
          content: [JSON.stringify(staged.summary)],
        };
      await this.call(`${path}/file_stream`, {
        files,
        ...(last && exitcode !== undefined ? { complete: true, exitcode } : {}),
      });
      // these lines are the server's now: a later retry appends after them
      this.historyOffset += chunk.length;
      staged.sentLines += chunk.length;
      const newest = staged.lines[staged.sentLines - 1];
      if (newest) this.lastStep = Math.max(this.lastStep, newest.step);
    }
    this.pending = staged.pending;
    this.lastStep = staged.lastStep;
    this.summary = staged.summary;
    this.skippedRows += staged.skipped;
    if (this.staged === staged) this.staged = undefined;
  }

  private async ensureRun(): Promise<WandbRun> {
    if (this.run) return this.run;
    if (!this.options.apiKey) throw new TrackerRejectedError("wandb: WANDB_API_KEY is not set; nothing is sent to W&B");
    const bucket = await this.upsert({
      name: this.runId,
      project: this.options.project,
      ...(this.options.entity ? { entity: this.options.entity } : {}),
      displayName: this.options.displayName,
    });
    const entity = bucket.project.entity.name;
    const project = bucket.project.name;
    // a continued run: append after its lines, and skip the steps it already has
    this.historyOffset = bucket.historyLineCount ?? 0;
    const held = z.object({ _step: z.number().int() }).safeParse(jsonOrUndefined(bucket.summaryMetrics ?? "{}"));
    if (held.success) {
      this.lastStep = held.data._step;
      this.summary = jsonOrUndefined(bucket.summaryMetrics ?? "{}") as Record<string, unknown>;
    }
    this.run = {
      baseUrl: this.base,
      entity,
      project,
      runId: bucket.name,
      url: runUrl(this.base, entity, project, bucket.name),
    };
    this.options.onRun?.(this.run);
    return this.run;
  }

  private async upsert(variables: Record<string, string>) {
    const answer = await this.call("graphql", { query: UPSERT_BUCKET, variables });
    const errors = GraphqlErrors.safeParse(answer);
    // GraphQL reports a refused mutation with HTTP 200 and `errors`: the request's fault
    if (errors.success)
      throw new TrackerRejectedError(`wandb upsertBucket: ${errors.data.errors.map((e) => e.message).join("; ")}`);
    return UpsertBucketResponse.parse(answer).data.upsertBucket.bucket;
  }

  private async call(path: string, body: unknown): Promise<unknown> {
    const response = await (this.options.fetch ?? fetch)(`${this.base}/${path}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Basic ${Buffer.from(`api:${this.options.apiKey ?? ""}`).toString("base64")}`,
      },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(this.options.requestTimeoutMs ?? 30_000),
    });
    const text = await response.text();
    if (response.ok) return text ? JSON.parse(text) : {};
    const message = `W&B ${path.endsWith("file_stream") ? "file_stream" : path} answered HTTP ${response.status}: ${text.slice(0, 300)}`;
    throw httpFailure(response.status, message);
  }
}

/** The run's page: wandb.ai for W&B's cloud API, the same host for a dedicated or self-hosted server. */
export function runUrl(baseUrl: string, entity: string, project: string, runId: string): string {
  const app = baseUrl.replace(/\/+$/, "").replace(/^https:\/\/api\.wandb\.ai$/, "https://wandb.ai");
  return `${app}/${encodeURIComponent(entity)}/${encodeURIComponent(project)}/runs/${encodeURIComponent(runId)}`;
}
