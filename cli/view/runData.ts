import { existsSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { z } from "zod";
import { BpeTokenizer } from "../../shared/chat/tokenizer.ts";
import { TransportConfig } from "../../shared/config/transport.ts";
import { issuesOf, ValidationError } from "../../shared/errors.ts";
import { Trajectory } from "../../shared/protocol/messages.ts";
import { STEP_RECORD_PREFIX, StepRecord, type StepTrajectory } from "../../shared/protocol/stepRecord.ts";
import { readTrackerLinks, type TrackerLinks } from "../../shared/tracking/links.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import type { ObjectStore, Transport } from "../../shared/transport/types.ts";

/**
 * A run as `agentrl view` sees it: an in-memory index of one summary per stored trajectory,
 * joined with the trainer's step records, built once when the viewer starts. Pages then filter,
 * sort and page that index on the server; a trajectory's full object is read only when its page
 * is opened.
 */

/** The run folder cannot be opened at all (the CLI says why and exits 2, as for any bad input). */
export class RunFolderError extends ValidationError {
  constructor(message: string) {
    super("run folder", [{ path: "<run-dir>", message }]);
  }
}

/** One row of the trajectory list. */
export interface TrajectorySummary {
  readonly trajectoryId: string;
  readonly key: string;
  readonly task: string;
  readonly index: number;
  readonly groupId: string;
  readonly sample: number;
  readonly status: string;
  readonly reward: number;
  /** Completed with the task's full environment reward (see SUCCESS_REWARD), apart from how it ended. */
  readonly success: boolean;
  readonly turns: number;
  readonly tokens: number;
  /** Generated (loss-mask 1) tokens. */
  readonly generated: number;
  /** Oldest and newest policy version among the generated tokens (-1 when none). */
  readonly minVersion: number;
  readonly maxVersion: number;
  readonly pools: readonly string[];
  /** The trainer step that consumed it, or null when no step record names it. */
  readonly step: number | null;
  /** Versions between the trained weights and its oldest generated token (null until consumed). */
  readonly staleness: number | null;
  readonly advantage: number | null;
  readonly normalizedAdvantage: number | null;
  readonly dropped: string | null;
}

/** What the step records say about one trajectory. */
export interface TrainerView {
  readonly step: number;
  readonly trainedVersion: number;
  readonly entry?: StepTrajectory;
  readonly dropped?: string;
}

/**
 * The environment reward at which an episode counts as a success: 1 for every shipped task (the
 * binary tasks' only reward, WebShop's perfect purchase; its graded rewards below 1 are partial).
 * `completed` only says the agent ended the episode itself, so a completed episode with reward 0
 * is no success.
 */
export const SUCCESS_REWARD = 1;

/** The list's filter, sort and page, as validated from the URL query (strings coerced). */
export const ListQuery = z
  .object({
    task: z.string().optional(),
    status: z.string().optional(),
    pool: z.string().optional(),
    group: z.string().optional(),
    /** Substring of the trajectory id. */
    q: z.string().optional(),
    /** `yes`: successes only; `no`: the rest. */
    success: z.enum(["yes", "no"]).optional(),
    /** A step number, `none` (not consumed) or `dropped`. */
    step: z.union([z.coerce.number().int().positive(), z.enum(["none", "dropped"])]).optional(),
    minReward: z.coerce.number().optional(),
    maxReward: z.coerce.number().optional(),
    sort: z
      .enum([
        "trajectoryId",
        "task",
        "index",
        "sample",
        "status",
        "success",
        "reward",
        "normalizedAdvantage",
        "turns",
        "tokens",
        "minVersion",
        "staleness",
        "step",
      ])
      .default("trajectoryId"),
    dir: z.enum(["asc", "desc"]).default("asc"),
    page: z.coerce.number().int().min(1).default(1),
    per: z.coerce.number().int().min(1).max(500).default(100),
  })
  .strict();
export type ListQuery = z.infer<typeof ListQuery>;

export interface ListPage {
  readonly rows: readonly TrajectorySummary[];
  /** Rows matching the filter (over all pages). */
  readonly matching: number;
  readonly pages: number;
}

/** Where the run's stores are and what its folder lacks. */
interface RunLocation {
  readonly experimentId: string;
  readonly trajectories: ObjectStore;
  readonly checkpoints: ObjectStore;
  readonly transport?: Transport;
  readonly problems: string[];
}

const RunConfigHead = z.object({ experimentId: z.string().min(1), transport: z.record(z.string(), z.unknown()) });

export interface OpenRunOptions {
  /** Read the stores over SQS/S3 at this endpoint (a run made with `--transport aws`). */
  readonly endpoint?: string;
  readonly transport?: "local" | "aws";
  /** Called as the index is read: (read so far, total). */
  readonly onProgress?: (done: number, total: number) => void;
}

async function locate(runDir: string, options: OpenRunOptions): Promise<RunLocation> {
  if (!existsSync(runDir) || !statSync(runDir).isDirectory())
    throw new RunFolderError(
      `${runDir} does not exist or is not a folder; give the run folder \`npm start\` or \`agentrl train\` printed (runs/<experiment>-<time>)`,
    );
  const configFile = join(runDir, "config.json");
  if (!existsSync(configFile))
    throw new RunFolderError(
      `${runDir} is not a run folder: it has no config.json (a run folder holds config.json, metrics.jsonl, transport/ and report.html)`,
    );
  let head: z.infer<typeof RunConfigHead>;
  try {
    const parsed = RunConfigHead.safeParse(JSON.parse(readFileSync(configFile, "utf8")));
    if (!parsed.success)
      throw new RunFolderError(
        `${configFile} lacks what the viewer needs: ${issuesOf(parsed.error)
          .map((i) => `${i.path}: ${i.message}`)
          .join("; ")}`,
      );
    head = parsed.data;
  } catch (error) {
    if (error instanceof RunFolderError) throw error;
    throw new RunFolderError(`${configFile} is not valid JSON (${(error as Error).message})`);
  }
  const problems: string[] = [];
  const kind = options.endpoint ? "aws" : (options.transport ?? head.transport.kind);
  if (kind === "aws") {
    const parsed = TransportConfig.safeParse({ ...head.transport, kind: "aws", endpoint: options.endpoint });
    if (!parsed.success)
      throw new RunFolderError(
        `the run's transport settings are not valid for aws: ${issuesOf(parsed.error)
          .map((i) => `transport.${i.path}: ${i.message}`)
          .join("; ")}`,
      );
    const transport = await createTransport(parsed.data, { ensureResources: false });
    return {
      experimentId: head.experimentId,
      trajectories: transport.store("trajectories"),
      checkpoints: transport.store("checkpoints"),
      transport,
      problems,
    };
  }
  // The run's own transport/ first (the folder may have moved since config.json was written).
  const named = typeof head.transport.localDir === "string" ? resolve(runDir, head.transport.localDir) : undefined;
  const candidates = [join(runDir, "transport"), ...(named ? [named] : [])];
  const localDir = candidates.find((dir) => existsSync(join(dir, "objects")));
  if (!localDir)
    problems.push(
      `no stored trajectories: neither ${candidates.join(" nor ")} holds objects/ (the run stopped before its first episode, or used --transport aws: add --endpoint URL)`,
    );
  const base = localDir ?? join(runDir, "transport");
  return {
    experimentId: head.experimentId,
    trajectories: new LocalObjectStore(join(base, "objects", "trajectories")),
    checkpoints: new LocalObjectStore(join(base, "objects", "checkpoints")),
    problems,
  };
}

/** Runs `work` over `items` with at most `limit` in flight. */
async function pooled<T>(items: readonly T[], limit: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await work(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

function compare(a: number | string | boolean | null, b: number | string | boolean | null): number {
  if (a === b) return 0;
  if (a === null) return 1; // missing values last
  if (b === null) return -1;
  return a < b ? -1 : 1;
}

export class RunView {
  private readonly byId = new Map<string, TrajectorySummary>();
  private readonly byGroup = new Map<string, string[]>();
  private readonly trainerViews = new Map<string, TrainerView>();
  readonly steps = new Map<number, StepRecord>();
  readonly summaries: TrajectorySummary[] = [];
  tokenizer: BpeTokenizer | undefined;

  private constructor(
    readonly runDir: string,
    private readonly location: RunLocation,
  ) {}

  get experimentId(): string {
    return this.location.experimentId;
  }

  /** The tracker runs this run wrote to (trackers.json), read on each page: a training run adds them as it goes. */
  get trackerLinks(): TrackerLinks {
    return readTrackerLinks(this.runDir);
  }

  /** What the folder lacks or could not be read, shown on every page. */
  get problems(): readonly string[] {
    return this.location.problems;
  }

  static async open(dir: string, options: OpenRunOptions = {}): Promise<RunView> {
    const runDir = resolve(dir);
    const view = new RunView(runDir, await locate(runDir, options));
    await view.loadSteps();
    await view.loadTrajectories(options.onProgress);
    await view.loadTokenizer();
    return view;
  }

  async close(): Promise<void> {
    await this.location.transport?.close();
  }

  private async loadSteps(): Promise<void> {
    const keys = (await this.location.trajectories.list(STEP_RECORD_PREFIX)).map((o) => o.key);
    const invalid: string[] = [];
    await pooled(keys, 16, async (key) => {
      const parsed = StepRecord.safeParse(safeJson((await this.location.trajectories.getText(key)) ?? ""));
      if (!parsed.success) {
        invalid.push(`${key} (${issuesOf(parsed.error)[0]?.path || "(root)"}: ${issuesOf(parsed.error)[0]?.message})`);
        return;
      }
      this.steps.set(parsed.data.step, parsed.data);
    });
    if (invalid.length > 0)
      this.location.problems.push(
        `${invalid.length} step record(s) could not be read (older or newer schema?), e.g. ${invalid.slice(0, 3).join(", ")}`,
      );
    if (keys.length === 0)
      this.location.problems.push(
        "no trainer step records (steps/ in the trajectory store): the run was made before the trainer kept them, or no step finished; the step, advantage and per-token trainer columns stay empty",
      );
    for (const record of [...this.steps.values()].sort((a, b) => a.step - b.step)) {
      for (const entry of record.trajectories)
        this.trainerViews.set(entry.trajectoryId, {
          step: record.step,
          trainedVersion: record.trainedVersion,
          entry,
          ...(entry.dropped ? { dropped: entry.dropped } : {}),
        });
      for (const u of record.unloaded)
        this.trainerViews.set(u.trajectoryId, {
          step: record.step,
          trainedVersion: record.trainedVersion,
          dropped: u.dropped,
        });
    }
  }

  private async loadTrajectories(onProgress?: (done: number, total: number) => void): Promise<void> {
    const keys = (await this.location.trajectories.list("trajectories/")).map((o) => o.key);
    const invalid: string[] = [];
    let done = 0;
    await pooled(keys, 16, async (key) => {
      const text = await this.location.trajectories.getText(key);
      const parsed = Trajectory.safeParse(safeJson(text ?? ""));
      done += 1;
      if (done % 500 === 0 || done === keys.length) onProgress?.(done, keys.length);
      if (!parsed.success) {
        const issue = issuesOf(parsed.error)[0];
        invalid.push(`${key} (${issue?.path || "(root)"}: ${issue?.message})`);
        return;
      }
      this.add(key, parsed.data);
    });
    this.summaries.sort((a, b) => compare(a.trajectoryId, b.trajectoryId));
    if (invalid.length > 0)
      this.location.problems.push(
        `${invalid.length} stored trajectory object(s) could not be read (older or newer schema?) and are not listed, e.g. ${invalid.slice(0, 3).join(", ")}`,
      );
  }

  private add(key: string, t: Trajectory): void {
    const versions = t.policyVersion.filter((v, i) => t.lossMask[i] === 1 && v >= 0);
    const minVersion = versions.length ? Math.min(...versions) : -1;
    const trainer = this.trainerViews.get(t.trajectoryId);
    const summary: TrajectorySummary = {
      trajectoryId: t.trajectoryId,
      key,
      task: t.task,
      index: t.index,
      groupId: t.groupId,
      sample: t.sample,
      status: t.status,
      reward: t.reward,
      success: t.status === "completed" && t.envReward >= SUCCESS_REWARD,
      turns: t.turns,
      tokens: t.tokenIds.length,
      generated: t.lossMask.reduce<number>((s, m) => s + m, 0),
      minVersion,
      maxVersion: versions.length ? Math.max(...versions) : -1,
      pools: [...new Set(t.policyPool.filter((p): p is string => p !== null))].sort(),
      step: trainer?.step ?? null,
      staleness: trainer && minVersion >= 0 ? Math.max(0, trainer.trainedVersion - minVersion) : null,
      advantage: trainer?.entry?.advantage ?? null,
      normalizedAdvantage: trainer?.entry?.normalizedAdvantage ?? null,
      dropped: trainer?.dropped ?? null,
    };
    this.summaries.push(summary);
    this.byId.set(t.trajectoryId, summary);
    this.byGroup.set(t.groupId, [...(this.byGroup.get(t.groupId) ?? []), t.trajectoryId]);
  }

  private async loadTokenizer(): Promise<void> {
    const key = (await this.location.checkpoints.list("policies/")).find((o) => o.key.endsWith("/tokenizer.json"))?.key;
    const text = key ? await this.location.checkpoints.getText(key) : undefined;
    try {
      if (text) this.tokenizer = BpeTokenizer.fromText(text);
    } catch (error) {
      this.location.problems.push(`${key} could not be loaded (${(error as Error).message}); tokens are shown as ids`);
      return;
    }
    if (!this.tokenizer)
      this.location.problems.push("no tokenizer.json in the checkpoint store; tokens are shown as ids");
  }

  /** Distinct values for the filter's menus. */
  facets(): { tasks: string[]; statuses: string[]; pools: string[]; steps: number[] } {
    const distinct = (f: (s: TrajectorySummary) => readonly string[]) => [...new Set(this.summaries.flatMap(f))].sort();
    return {
      tasks: distinct((s) => [s.task]),
      statuses: distinct((s) => [s.status]),
      pools: distinct((s) => s.pools),
      steps: [...this.steps.keys()].sort((a, b) => a - b),
    };
  }

  /** One page of the list, filtered and sorted on the server. */
  list(query: ListQuery): ListPage {
    const matches = this.summaries.filter(
      (s) =>
        (query.task === undefined || s.task === query.task) &&
        (query.status === undefined || s.status === query.status) &&
        (query.success === undefined || s.success === (query.success === "yes")) &&
        (query.pool === undefined || s.pools.includes(query.pool)) &&
        (query.group === undefined || s.groupId === query.group) &&
        (query.q === undefined || s.trajectoryId.includes(query.q)) &&
        (query.minReward === undefined || s.reward >= query.minReward) &&
        (query.maxReward === undefined || s.reward <= query.maxReward) &&
        (query.step === undefined ||
          (query.step === "none"
            ? s.step === null
            : query.step === "dropped"
              ? s.dropped !== null
              : s.step === query.step)),
    );
    const sign = query.dir === "asc" ? 1 : -1;
    const key = query.sort;
    matches.sort((a, b) => sign * compare(a[key], b[key]) || compare(a.trajectoryId, b.trajectoryId));
    const pages = Math.max(1, Math.ceil(matches.length / query.per));
    const start = (query.page - 1) * query.per;
    return { rows: matches.slice(start, start + query.per), matching: matches.length, pages };
  }

  summary(id: string): TrajectorySummary | undefined {
    return this.byId.get(id);
  }

  trainerView(id: string): TrainerView | undefined {
    return this.trainerViews.get(id);
  }

  /** Ids of a group's stored members, by sample. */
  groupMembers(groupId: string): TrajectorySummary[] {
    return (this.byGroup.get(groupId) ?? [])
      .map((id) => this.byId.get(id) as TrajectorySummary)
      .sort((a, b) => a.sample - b.sample);
  }

  /** The full stored trajectory (read on demand); undefined when it is not in the index. */
  async trajectory(id: string): Promise<Trajectory | undefined> {
    const summary = this.byId.get(id);
    if (!summary) return undefined;
    const parsed = Trajectory.safeParse(safeJson((await this.location.trajectories.getText(summary.key)) ?? ""));
    return parsed.success ? parsed.data : undefined;
  }

  /** A token's text (its UTF-8 bytes decoded; `#id` without a tokenizer). */
  tokenText(id: number): string {
    if (!this.tokenizer) return `#${id}`;
    return new TextDecoder("utf-8", { fatal: false }).decode(Uint8Array.from(this.tokenizer.tokenBytes(id)));
  }
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
