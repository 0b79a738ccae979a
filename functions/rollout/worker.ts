import type { ExperimentConfig } from "../../shared/config/index.ts";
import { EnvApiError, EnvCapacityError } from "../../shared/env/client.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import { PolicyClient, PolicyUnavailableError } from "../../shared/policy/client.ts";
import { parseExperimentMessage } from "../../shared/protocol/envelope.ts";
import { MemberDropped, RolloutRequest, Trajectory, TrajectoryReady } from "../../shared/protocol/messages.ts";
import { readyOf } from "../../shared/protocol/trajectoryKeys.ts";
import { sleep } from "../../shared/sleep.ts";
import type { ReceivedMessage, Transport } from "../../shared/transport/types.ts";
import { type EnvApi, type EpisodeCodec, runEpisode, trajectoryIdOf, trajectoryKey } from "./episode.ts";
import type { PolicyPool } from "./pool.ts";

/** The episode ran past `rollout.episodeTimeoutSeconds` (treated as an infrastructure failure). */
export class EpisodeTimeoutError extends AgentRlError {
  override readonly name = "EpisodeTimeoutError";
}

export interface RolloutWorkerOptions {
  /** Controller client (ControllerClient in production). */
  readonly env: EnvApi;
  readonly pool: Pick<PolicyPool, "draw">;
  readonly codec: EpisodeCodec;
  /** @default a PolicyClient with rollout.policyTimeoutSeconds */
  readonly policy?: Pick<PolicyClient, "generate">;
  /** Stops receiving; episodes in flight are cancelled and their requests released for redelivery. */
  readonly signal?: AbortSignal;
  /** Long-poll wait of each receive, seconds. @default 1 */
  readonly waitSeconds?: number;
  /** Called after a trajectory is stored and announced. */
  readonly onReady?: (ready: TrajectoryReady) => void;
  readonly log?: Logger;
}

/** What happened to one request message. */
export type RequestOutcome = "done" | "duplicate" | "dropped" | "failed" | "released";

export interface RolloutSummary {
  readonly done: number;
  readonly duplicates: number;
  /** Requests whose every attempt failed for environment or infrastructure reasons: announced as MemberDropped. */
  readonly dropped: number;
  readonly failed: number;
  readonly released: number;
  /** Attempts abandoned for infrastructure reasons and retried with a fresh session. */
  readonly infraRetries: number;
  /** Starts refused for lack of a free env slot (406) and retried after a pause, no attempt used. */
  readonly capacityWaits: number;
  /** Answers of stored trajectories discarded because they straddled an engine's weight reload (`rollout.versionSource: sync`). */
  readonly versionDiscards: number;
}

/** True for failures that are the infrastructure's, not the agent's: retry with a fresh session, never score. */
export function isInfrastructureFailure(error: unknown): boolean {
  return (
    (error instanceof EnvApiError && error.retryable) ||
    error instanceof PolicyUnavailableError ||
    error instanceof EpisodeTimeoutError
  );
}

function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

export { readyOf };

/**
 * A rollout worker: consumes RolloutRequests, runs the agent loop with up to
 * `rollout.concurrency` episodes at once, stores each Trajectory, sends TrajectoryReady and only
 * then deletes the request. Every message is handled on its own: a malformed body goes to
 * `fail` (and after maxReceiveCount to the dead-letter queue) with its reason; environment and
 * infrastructure failures are retried with a fresh session up to `rollout.maxAttempts` and never
 * scored, and after the last attempt the member is dropped: a MemberDropped event tells the
 * trainer the group is one short, then the request is deleted. A request whose trajectory
 * already exists (a redelivery) is only re-announced.
 *
 * @example
 * const stop = new AbortController();
 * await runRolloutWorker(config, transport, { env, pool, codec, signal: stop.signal });
 */
export async function runRolloutWorker(
  config: ExperimentConfig,
  transport: Transport,
  options: RolloutWorkerOptions,
): Promise<RolloutSummary> {
  const log = options.log ?? createLogger({ role: "rollout", experimentId: config.experimentId });
  const rollout = config.rollout;
  const requests = transport.queue("rollout-requests");
  const trajectories = transport.queue("trajectories");
  const store = transport.store("trajectories");
  const policy = options.policy ?? new PolicyClient(rollout.policyTimeoutSeconds * 1000);
  const shutdown = options.signal ?? new AbortController().signal;
  const visibility = config.transport.visibilityTimeoutSeconds;
  const counts = {
    done: 0,
    duplicates: 0,
    dropped: 0,
    failed: 0,
    released: 0,
    infraRetries: 0,
    capacityWaits: 0,
    versionDiscards: 0,
  };

  const announce = async (trajectory: Trajectory, key: string): Promise<void> => {
    const ready = TrajectoryReady.parse(readyOf(trajectory, key));
    await trajectories.send(JSON.stringify(ready));
    options.onReady?.(ready);
  };

  const handle = async (message: ReceivedMessage): Promise<RequestOutcome> => {
    let request: RolloutRequest;
    try {
      request = parseExperimentMessage(RolloutRequest, message.body, "RolloutRequest", config.experimentId);
    } catch (error) {
      await requests.fail(message.receiptHandle, describeError(error));
      log.warn({ messageId: message.id, reason: describeError(error) }, "rejected a rollout request");
      return "failed";
    }
    const trajectoryId = trajectoryIdOf(request);
    const key = trajectoryKey(request.experimentId, request.groupId, trajectoryId);

    // a redelivered request whose trajectory was stored already: announce again (the trainer dedups), no new episode
    const existing = await store.getText(key);
    if (existing !== undefined) {
      // a corrupt stored object is not a poison message: the episode runs again and replaces it
      const stored = Trajectory.safeParse(parseJsonOrUndefined(existing));
      if (stored.success) {
        await announce(stored.data, key);
        await requests.delete(message.receiptHandle);
        return "duplicate";
      }
    }

    let lastError: unknown;
    // Every env slot taken (406) is backpressure, not a failed attempt: wait without using one up,
    // for at most the episode's own time limit in all.
    const capacityWaitMs = rollout.episodeTimeoutSeconds * 1000;
    let capacityWaited = 0;
    for (let attempt = request.attempt; attempt < rollout.maxAttempts; attempt++) {
      if (shutdown.aborted) break;
      const episode = new AbortController();
      const timer = setTimeout(
        () => episode.abort(new EpisodeTimeoutError(`episode exceeded ${rollout.episodeTimeoutSeconds} s`)),
        rollout.episodeTimeoutSeconds * 1000,
      );
      const signal = AbortSignal.any([shutdown, episode.signal]);
      try {
        const trajectory = Trajectory.parse(
          await runEpisode(request, { ...options, policy, rollout, seed: config.seed }, signal, attempt),
        );
        await store.put(key, JSON.stringify(trajectory));
        counts.versionDiscards += trajectory.metrics.version_discards ?? 0;
        await announce(trajectory, key);
        await requests.delete(message.receiptHandle);
        log.debug({ trajectoryId, status: trajectory.status, reward: trajectory.reward }, "trajectory ready");
        return "done";
      } catch (error) {
        lastError = episode.signal.aborted && !shutdown.aborted ? episode.signal.reason : error;
        if (shutdown.aborted) break;
        if (!isInfrastructureFailure(lastError)) {
          await requests.fail(message.receiptHandle, describeError(lastError));
          log.error({ trajectoryId, err: lastError }, "rollout request failed");
          return "failed";
        }
        if (lastError instanceof EnvCapacityError && capacityWaited < capacityWaitMs) {
          const pause = Math.min(2_000, 2 * Math.max(rollout.retryBackoffMs, 10), capacityWaitMs - capacityWaited);
          capacityWaited += pause;
          counts.capacityWaits += 1;
          await sleep(pause, shutdown);
          attempt -= 1; // the same attempt again: no session was started
          continue;
        }
        counts.infraRetries += 1;
        log.warn(
          { trajectoryId, attempt, reason: describeError(lastError) },
          "infrastructure failure; retrying with a fresh session",
        );
        await sleep(Math.min(30_000, rollout.retryBackoffMs * 2 ** (attempt - request.attempt)), shutdown);
      } finally {
        clearTimeout(timer);
      }
    }
    if (shutdown.aborted) {
      await requests.changeVisibility(message.receiptHandle, 0).catch(() => {});
      return "released";
    }
    const attempts = rollout.maxAttempts - request.attempt;
    const dropped: MemberDropped = MemberDropped.parse({
      schemaVersion: 1,
      kind: "member-dropped",
      trajectoryId,
      experimentId: request.experimentId,
      groupId: request.groupId,
      groupSize: request.groupSize,
      task: request.task,
      attempts: Math.max(1, attempts),
      reason: `environment or infrastructure failures in ${attempts} attempts; last: ${describeError(lastError)}`.slice(
        0,
        2000,
      ),
    });
    await trajectories.send(JSON.stringify(dropped));
    await requests.delete(message.receiptHandle);
    log.warn({ trajectoryId, task: request.task, reason: dropped.reason }, "group member dropped");
    return "dropped";
  };

  const processMessage = async (message: ReceivedMessage): Promise<void> => {
    // keep the request hidden while its episode runs (episodes may outlast the visibility timeout)
    const keepAlive = setInterval(
      () => void requests.changeVisibility(message.receiptHandle, visibility).catch(() => {}),
      Math.max(1, visibility / 3) * 1000,
    );
    try {
      const outcome = await handle(message);
      if (outcome === "done") counts.done += 1;
      else if (outcome === "duplicate") counts.duplicates += 1;
      else if (outcome === "dropped") counts.dropped += 1;
      else if (outcome === "failed") counts.failed += 1;
      else counts.released += 1;
    } catch (error) {
      // transport trouble while storing or announcing: hand the message back with the reason
      counts.failed += 1;
      log.error({ messageId: message.id, err: error }, "rollout request handling failed");
      await requests.fail(message.receiptHandle, describeError(error)).catch(() => {});
    } finally {
      clearInterval(keepAlive);
    }
  };

  const active = new Set<Promise<void>>();
  log.info({ concurrency: rollout.concurrency }, "rollout worker started");
  while (!shutdown.aborted) {
    const free = rollout.concurrency - active.size;
    if (free <= 0) {
      await Promise.race(active);
      continue;
    }
    let received: ReceivedMessage[];
    try {
      received = await requests.receive({ maxMessages: Math.min(10, free), waitSeconds: options.waitSeconds ?? 1 });
    } catch (error) {
      log.warn({ err: error }, "receive failed; retrying");
      await sleep(1000, shutdown);
      continue;
    }
    if (shutdown.aborted) {
      for (const m of received) await requests.changeVisibility(m.receiptHandle, 0).catch(() => {});
      break;
    }
    // nothing to do: yield to timers and I/O (a receive without long polling may resolve synchronously)
    if (received.length === 0) await sleep(active.size > 0 ? 20 : 100, shutdown);
    for (const message of received) {
      const task: Promise<void> = processMessage(message).finally(() => active.delete(task));
      active.add(task);
    }
  }
  await Promise.allSettled(active);
  log.info(counts, "rollout worker stopped");
  return { ...counts };
}

function parseJsonOrUndefined(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
