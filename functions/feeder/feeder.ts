import { z } from "zod";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { parseJsonOrThrow } from "../../shared/errors.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import { sleep } from "../../shared/sleep.ts";
import { isTransientTransportError } from "../../shared/transport/errors.ts";
import type { ObjectStore, Transport } from "../../shared/transport/types.ts";
import { type PlannedGroup, type PlannedTask, requestsOf, TaskMixPlan } from "./plan.ts";

/**
 * The feeder: turns the experiment's task mix into RolloutRequests (n per task instance, one
 * groupId) and keeps the pipeline fed without flooding it.
 *
 * - async mode: queued requests + unconsumed trajectories (both queues, visible + in flight)
 *   stay under `max(rollout.maxInFlightBatches, trainer.warmupFactor)` trainer batches — the
 *   bound that keeps off-policyness small (reference section 1.1).
 * - sync mode: one batch, then wait for the trainer to publish a newer policy version, repeat.
 *
 * Its cursor (next group seq, last version fed) lives in the trajectory store, written after
 * each send: a restart continues the same deterministic sequence, and a crash between send and
 * cursor write re-sends groups with the same ids, which rollout workers and the trainer dedup.
 */

/** Persisted position of the feeder. */
export const FeederCursor = z.object({
  schemaVersion: z.literal(1),
  nextSeq: z.number().int().nonnegative(),
  batchesFed: z.number().int().nonnegative(),
  /** sync mode: the newest policy version when the last batch was sent (-1: none existed). */
  lastFedVersion: z.number().int().min(-1),
});
export type FeederCursor = z.infer<typeof FeederCursor>;

/** Longest wait between attempts after a transport error that may pass (doubling from pollMs). */
const RETRY_MAX_MS = 10_000;

/** How often an async-mode feeder acknowledges version notices it does not wait on. */
const SETTLE_EVERY_MS = 5_000;

/** Object key of the feeder cursor of an experiment. */
export function feederCursorKey(experimentId: string): string {
  return `feeder/${experimentId}/cursor.json`;
}

export interface FeederOptions {
  /** Stops the feeder (it returns its summary). */
  readonly signal?: AbortSignal;
  /** Pause between depth / version checks, ms. @default 250 */
  readonly pollMs?: number;
  /** Newest published policy version, -1 when none (sync mode waits on it). */
  readonly latestVersion?: () => Promise<number>;
  /**
   * Called with the version the feeder has acted on (sync: after the batch for it was sent and
   * the cursor written; async: now and then): notices of versions up to it may be acknowledged.
   */
  readonly settleVersions?: (version: number) => Promise<void>;
  /** Train index range of a task; @default [0, trainInstances) */
  readonly trainRange?: (task: string) => { start: number; end: number } | undefined;
  /** Stop after the cursor reaches this many groups in total (tests, benchmarks). */
  readonly maxGroups?: number;
  /** Called after each send with the groups sent. */
  readonly onEmit?: (groups: readonly PlannedGroup[]) => void;
  readonly log?: Logger;
}

export interface FeederSummary {
  readonly groupsSent: number;
  readonly requestsSent: number;
  readonly cursor: FeederCursor;
}

/** The planner's view of the configured mix (trainInstances from the start of the train range). */
export function plannedTasks(config: ExperimentConfig, trainRange?: FeederOptions["trainRange"]): PlannedTask[] {
  return config.tasks.mix.map((entry) => {
    const range = trainRange?.(entry.name);
    const start = range?.start ?? 0;
    const available = range ? range.end - range.start : entry.trainInstances;
    return {
      name: entry.name,
      weight: entry.weight,
      start,
      count: Math.max(1, Math.min(entry.trainInstances, available)),
    };
  });
}

/** Most groups (requests / n) allowed in flight in async mode. */
export function inFlightGroupCap(config: ExperimentConfig): number {
  const batches = Math.max(config.rollout.maxInFlightBatches, config.trainer.warmupFactor);
  return Math.ceil(batches * config.trainer.batchSize);
}

async function readCursor(store: ObjectStore, experimentId: string): Promise<FeederCursor> {
  const text = await store.getText(feederCursorKey(experimentId));
  if (text === undefined) return { schemaVersion: 1, nextSeq: 0, batchesFed: 0, lastFedVersion: -1 };
  return parseJsonOrThrow(FeederCursor, text, feederCursorKey(experimentId));
}

/**
 * Runs the feeder until `signal` aborts or `maxGroups` is reached.
 * @example
 * const controller = new AbortController();
 * const done = runFeeder(config, transport, { signal: controller.signal, latestVersion });
 * // ... later
 * controller.abort(); await done;
 */
export async function runFeeder(
  config: ExperimentConfig,
  transport: Transport,
  options: FeederOptions = {},
): Promise<FeederSummary> {
  const log = options.log ?? createLogger({ role: "feeder", experimentId: config.experimentId });
  const pollMs = options.pollMs ?? 250;
  const n = config.rollout.groupSize;
  const requests = transport.queue("rollout-requests");
  const trajectories = transport.queue("trajectories");
  const store = transport.store("trajectories");
  let plan = new TaskMixPlan(plannedTasks(config, options.trainRange), config.seed);
  let cursor = await readCursor(store, config.experimentId);
  plan.skipTo(cursor.nextSeq);
  let groupsSent = 0;
  let requestsSent = 0;
  const sync = config.trainer.mode === "sync";
  if (sync && !options.latestVersion) throw new RangeError("runFeeder: sync mode needs options.latestVersion");
  log.info({ mode: config.trainer.mode, nextSeq: cursor.nextSeq }, "feeder started");

  const emit = async (count: number, version: number): Promise<void> => {
    const groups = Array.from({ length: count }, () => plan.next());
    const pinned = sync ? version : undefined;
    const bodies = groups.flatMap((g) => requestsOf(g, config.experimentId, n, pinned).map((r) => JSON.stringify(r)));
    await requests.sendBatch(bodies);
    cursor = { schemaVersion: 1, nextSeq: plan.position, batchesFed: cursor.batchesFed + 1, lastFedVersion: version };
    await store.put(feederCursorKey(config.experimentId), JSON.stringify(cursor));
    groupsSent += count;
    requestsSent += bodies.length;
    options.onEmit?.(groups);
    log.debug({ groups: count, nextSeq: cursor.nextSeq }, "sent rollout requests");
  };

  // After a transport error that may pass, resume as a restarted feeder would: from the saved cursor.
  const resume = async (error: unknown, attempt: number): Promise<void> => {
    const waitMs = Math.min(RETRY_MAX_MS, pollMs * 2 ** attempt);
    log.warn({ err: error, attempt, waitMs }, "transport error that may pass; resuming from the saved cursor");
    await sleep(waitMs, options.signal);
    cursor = await readCursor(store, config.experimentId);
    plan = new TaskMixPlan(plannedTasks(config, options.trainRange), config.seed);
    plan.skipTo(cursor.nextSeq);
  };

  // async mode waits on no version: acknowledge the notices every few seconds so they never pile up
  let lastSettle = 0;
  let failures = 0;
  while (!options.signal?.aborted) {
    try {
      if (!(await step())) break;
      failures = 0;
    } catch (error) {
      if (!isTransientTransportError(error)) throw error;
      // Asked to stop while a call was failing (a peer as slow as the stop): stopping loses nothing,
      // the cursor is saved after each send, so this is a stop, not a failure.
      if (options.signal?.aborted) {
        log.warn({ err: error }, "a transport call failed while stopping; stopped");
        break;
      }
      for (let lastError = error; !options.signal?.aborted; ) {
        failures += 1;
        try {
          await resume(lastError, failures);
          break;
        } catch (again) {
          if (!isTransientTransportError(again)) throw again;
          lastError = again;
        }
      }
    }
  }
  log.info({ groupsSent, requestsSent, nextSeq: cursor.nextSeq }, "feeder stopped");
  return { groupsSent, requestsSent, cursor };

  /** One round: feeds what the mode allows, or waits; false when every group is fed. */
  async function step(): Promise<boolean> {
    const remaining = options.maxGroups === undefined ? Number.POSITIVE_INFINITY : options.maxGroups - plan.position;
    if (remaining <= 0) return false;
    let count = 0;
    let version = cursor.lastFedVersion;
    if (sync) {
      version = await options.latestVersion!();
      if (cursor.batchesFed === 0 || version > cursor.lastFedVersion) count = config.trainer.batchSize;
      else await options.settleVersions?.(cursor.lastFedVersion);
    } else {
      if (options.latestVersion && options.settleVersions && Date.now() - lastSettle > SETTLE_EVERY_MS) {
        lastSettle = Date.now();
        await options.settleVersions(await options.latestVersion());
      }
      const [queued, pending] = await Promise.all([requests.approximateDepth(), trajectories.approximateDepth()]);
      const outstanding = queued.visible + queued.inFlight + pending.visible + pending.inFlight;
      count = Math.floor((inFlightGroupCap(config) * n - outstanding) / n);
    }
    count = Math.min(count, remaining);
    if (count > 0) {
      await emit(count, version);
      if (sync) await options.settleVersions?.(version);
    } else await sleep(pollMs, options.signal);
    return true;
  }
}
