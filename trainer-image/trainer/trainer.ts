import * as tf from "@tensorflow/tfjs";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { AgentRlError, parseJsonOrThrow, ValidationError } from "../../shared/errors.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import { initBackend } from "../../shared/model/backend.ts";
import { loadCheckpoint, saveCheckpoint, versionPrefix } from "../../shared/model/checkpoint.ts";
import type { TransformerPolicy } from "../../shared/model/transformer.ts";
import { type PolicyPublished, TrajectoryReady } from "../../shared/protocol/messages.ts";
import type { StepMetrics } from "../../shared/protocol/metrics.ts";
import type { PpoParams } from "../../shared/rl/ppo.ts";
import { padRows, ppoLossTensors } from "../../shared/rl/tensor.ts";
import { sleep } from "../../shared/sleep.ts";
import type { ReceivedMessage, Transport } from "../../shared/transport/types.ts";
import { importanceWeights, prepareBatch, taskMetrics } from "./batch.ts";
import { type BufferedGroup, GroupBuffer, groupsNeeded } from "./buffer.ts";
import { addTotals, type Ledger, readLedger, writeLedger } from "./ledger.ts";
import { PoisonedTrajectories } from "./load.ts";

/** The trainer cannot start (no checkpoint to train from, inconsistent state). */
export class TrainerError extends AgentRlError {
  override readonly name = "TrainerError";
}

/** What one finished step reports to `onStep`. */
export interface StepInfo {
  readonly step: number;
  /** Version published by this step (the previous one when checkpointEvery skipped publishing). */
  readonly version: number;
  readonly published: boolean;
  readonly trajectories: number;
  readonly metrics: Readonly<Record<string, number>>;
}

export interface TrainerOptions {
  /** Stops the loop between steps (the step in progress finishes and publishes first). */
  readonly signal?: AbortSignal;
  /** Receives one metrics line per step (write it as JSONL). */
  readonly metrics?: (line: StepMetrics) => void | Promise<void>;
  readonly onStep?: (info: StepInfo) => void;
  /** Stop after this many steps in this process (tests, benchmarks); trainer.maxSteps still applies. */
  readonly maxStepsThisRun?: number;
  /** Long-poll wait of each receive, seconds. @default 1 */
  readonly waitSeconds?: number;
  /** Fault injection for tests: runs after the step is trained, before anything is published. */
  readonly beforePublish?: (version: number) => void | Promise<void>;
  readonly log?: Logger;
}

export interface TrainerSummary {
  readonly stepsThisRun: number;
  readonly step: number;
  readonly version: number;
  readonly totals: Readonly<Record<string, number>>;
}

function describeError(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/**
 * The learner (reference section 4) on the event pipeline: consumes TrajectoryReady, buffers
 * whole groups, and per step: loads the trajectories (claim-check), applies the staleness bound
 * per token, computes advantages (+ task normalization), runs the PPO + KL loss through
 * `TrainablePolicy.trainStep` (Adam, gradient clipping), then publishes `policies/v{N+1}/`
 * (ledger first, manifest last), then PolicyPublished, then deletes the consumed messages.
 *
 * @example
 * const stop = new AbortController();
 * await runTrainer(config, transport, { signal: stop.signal, metrics: (line) => out.write(`${JSON.stringify(line)}\n`) });
 */
export async function runTrainer(
  config: ExperimentConfig,
  transport: Transport,
  options: TrainerOptions = {},
): Promise<TrainerSummary> {
  const log = options.log ?? createLogger({ role: "trainer", experimentId: config.experimentId });
  const trainer = config.trainer;
  const temperature = config.rollout.temperature;
  const checkpoints = transport.store("checkpoints");
  const trajectoryStore = transport.store("trajectories");
  const inbox = transport.queue("trajectories");
  const events = transport.queue("policy-events");
  const signal = options.signal ?? new AbortController().signal;
  const params: PpoParams = {
    clipLow: trainer.clipLow,
    clipHigh: trainer.clipHigh,
    dualClip: trainer.dualClip,
    klCoef: trainer.klCoef,
  };

  await initBackend(config.policy.backend);
  const loaded = await loadCheckpoint(checkpoints, "newest", {
    trainable: true,
    optimizer: {
      learningRate: trainer.learningRate,
      adamBeta1: trainer.adamBeta1,
      adamBeta2: trainer.adamBeta2,
      gradClip: trainer.gradClip,
      microBatchTokens: trainer.microBatchTokens,
    },
  }).catch((error: unknown) => {
    throw new TrainerError(
      `no policy to train from in the checkpoint store (${describeError(error)}); publish a base version first (agentrl sft)`,
    );
  });
  const policy: TransformerPolicy = loaded.policy;
  let version = loaded.manifest.version;
  const ledger: Ledger = (await readLedger(checkpoints, version)) ?? {
    schemaVersion: 1,
    experimentId: config.experimentId,
    version,
    step: loaded.manifest.step,
    referenceVersion: version,
    consumed: [],
    totals: {},
  };
  if (ledger.experimentId !== config.experimentId)
    throw new TrainerError(
      `policies/v${version} belongs to experiment "${ledger.experimentId}", not "${config.experimentId}"`,
    );
  let reference: TransformerPolicy | undefined;
  if (trainer.klCoef > 0)
    reference =
      ledger.referenceVersion === version
        ? policy.snapshot()
        : (await loadCheckpoint(checkpoints, ledger.referenceVersion)).policy;
  const consumed = new Set(ledger.consumed);
  const unpublished = new Set<string>();
  const totals = { ...ledger.totals };
  let step = ledger.step;
  let stepsThisRun = 0;
  let pendingAcks: string[] = [];
  const buffer = new GroupBuffer();
  const startedAt = Date.now();
  let lastStepAt = Date.now();
  let lastKeepAlive = Date.now();
  const visibility = config.transport.visibilityTimeoutSeconds;
  log.info({ version, step, reference: ledger.referenceVersion, consumed: consumed.size }, "trainer started");

  const counters = { duplicates: 0, rejected: 0 };
  const abandoned: BufferedGroup[] = [];
  const receiveOne = async (message: ReceivedMessage): Promise<void> => {
    let ready: TrajectoryReady;
    try {
      ready = parseJsonOrThrow(TrajectoryReady, message.body, "TrajectoryReady");
      if (ready.experimentId !== config.experimentId)
        throw new ValidationError("TrajectoryReady", [
          { path: "experimentId", message: `"${ready.experimentId}" is not this trainer's "${config.experimentId}"` },
        ]);
    } catch (error) {
      counters.rejected += 1;
      await inbox.fail(message.receiptHandle, describeError(error));
      return;
    }
    if (await poisoned.refail(ready.trajectoryId, message.receiptHandle)) return;
    if (consumed.has(ready.trajectoryId)) {
      // already trained (or dropped): acknowledge once the ledger holding it is published
      counters.duplicates += 1;
      if (unpublished.has(ready.trajectoryId)) pendingAcks.push(message.receiptHandle);
      else await inbox.delete(message.receiptHandle);
      return;
    }
    if (buffer.add(ready, message.receiptHandle) === "redelivered") counters.duplicates += 1;
  };

  const keepAlive = async (): Promise<void> => {
    if (Date.now() - lastKeepAlive < (visibility * 1000) / 3) return;
    lastKeepAlive = Date.now();
    const waiting = abandoned.flatMap((g) => [...g.members.values()].map((m) => m.receiptHandle));
    for (const receipt of [...buffer.receipts(), ...waiting, ...pendingAcks])
      await inbox.changeVisibility(receipt, visibility).catch(() => {});
  };

  const poisoned = new PoisonedTrajectories(inbox, log);
  const loadTrajectories = (groups: readonly BufferedGroup[]) => poisoned.loadGroups(trajectoryStore, groups);

  const trainOn = async (groups: BufferedGroup[], dropped: BufferedGroup[]): Promise<void> => {
    const stepStart = Date.now();
    const { trajectories, missing } = await loadTrajectories(groups);
    const batch = prepareBatch(trajectories, version, trainer, config.policy.model.contextLength);
    const sequences = batch.rows.map((r) => r.tokens);
    const refLogp = reference && sequences.length ? reference.logProbs(sequences, temperature) : undefined;
    const needsProximal = batch.rows.some((r) => r.pastBound.some((f) => f === 1));
    const proximal = needsProximal ? policy.logProbs(sequences, temperature) : undefined;
    const rowInputs = batch.rows.map((row, i) => {
      const weighted = proximal
        ? importanceWeights(row, proximal[i] as Float32Array, trainer.importanceWeightCap)
        : undefined;
      return {
        oldLogp: weighted?.oldLogp ?? row.oldLogp,
        weights: weighted?.weights,
        refLogp: refLogp?.[i],
        advantages: row.advantages,
        lossMask: row.lossMask,
        fresh: row.fresh,
      };
    });
    const sums = { pg: 0, kl: 0, clipped: 0, approxKl: 0, gap: 0, fresh: 0 };
    let loss = 0;
    let gradNorm = 0;
    let skipped = 0;
    if (sequences.length > 0) {
      try {
        const result = policy.trainStep(sequences, temperature, (logp, rows) => {
          const width = logp.shape[1];
          const picked = rows.map((r) => rowInputs[r]!);
          const terms = ppoLossTensors(
            {
              logp,
              oldLogp: padRows(
                picked.map((p) => p.oldLogp),
                width,
              ),
              refLogp: reference
                ? padRows(
                    picked.map((p) => p.refLogp ?? []),
                    width,
                  )
                : undefined,
              advantages: padRows(
                picked.map((p) => p.advantages),
                width,
              ),
              lossMask: padRows(
                picked.map((p) => p.lossMask),
                width,
              ),
              weights: proximal
                ? padRows(
                    picked.map((p) => p.weights ?? []),
                    width,
                  )
                : undefined,
            },
            params,
            batch.tokens,
          );
          // rollout/trainer agreement: |trainer logp - behaviour logp| on tokens of the trainer's own version
          const fresh = padRows(
            picked.map((p) => p.fresh),
            width,
          );
          const behaviour = padRows(
            picked.map((p) => p.oldLogp),
            width,
          );
          const gap = tf.sum(tf.mul(tf.abs(tf.sub(logp, behaviour)), fresh));
          const stats = tf
            .stack([terms.pgSum, terms.klSum, terms.clippedCount, terms.approxKlSum, gap, tf.sum(fresh)])
            .dataSync();
          sums.pg += stats[0] as number;
          sums.kl += stats[1] as number;
          sums.clipped += stats[2] as number;
          sums.approxKl += stats[3] as number;
          sums.gap += stats[4] as number;
          sums.fresh += stats[5] as number;
          return terms.loss;
        });
        loss = result.loss;
        gradNorm = result.gradNorm;
      } catch (error) {
        // a non-finite gradient leaves the weights unchanged; the batch is still consumed and counted
        skipped = 1;
        log.error({ err: error }, "optimizer step skipped");
      }
    }
    step += 1;
    stepsThisRun += 1;
    const tokens = Math.max(batch.tokens, 1);
    const trainedIds = [...groups, ...dropped].flatMap((g) => [...g.members.keys()]);
    for (const id of trainedIds) {
      consumed.add(id);
      unpublished.add(id);
    }
    for (const g of [...groups, ...dropped])
      for (const m of g.members.values()) pendingAcks.push(m.receiptHandle, ...m.olderReceipts);
    const now = Date.now();
    const stepTotals: Record<string, number> = {
      "totals/trajectories": trajectories.length,
      "totals/tokens": batch.tokens,
      "totals/stale_dropped": batch.metrics["rollout/stale_dropped"] ?? 0,
      "totals/stale_dropped_trajectories": batch.metrics["rollout/stale_dropped_trajectories"] ?? 0,
      "totals/importance_weighted": batch.metrics["rollout/importance_weighted"] ?? 0,
      "totals/duplicates": counters.duplicates,
      "totals/missing": missing,
      "totals/groups_abandoned": dropped.length,
      "totals/rejected": counters.rejected,
    };
    addTotals(totals, stepTotals);
    const metrics: Record<string, number> = {
      "loss/total": loss,
      "loss/policy": sums.pg / tokens,
      "loss/kl": sums.kl / tokens,
      "policy/clip_frac": sums.clipped / tokens,
      "policy/approx_kl": sums.approxKl / tokens,
      "policy/grad_norm": gradNorm,
      "policy/logp_gap_fresh": sums.fresh > 0 ? sums.gap / sums.fresh : 0,
      "policy/step_skipped": skipped,
      ...batch.metrics,
      "rollout/trajectories": trajectories.length,
      "rollout/groups": groups.length,
      "rollout/tokens": batch.tokens,
      "rollout/duplicates": counters.duplicates,
      "rollout/missing": missing,
      "rollout/groups_abandoned": dropped.length,
      "rollout/buffered": buffer.trajectoryCount,
      ...taskMetrics(trajectories),
      "throughput/trajectories_per_s": trajectories.length / Math.max((now - lastStepAt) / 1000, 1e-3),
      "time/step_seconds": (now - stepStart) / 1000,
      ...Object.fromEntries(Object.entries(totals).map(([k, v]) => [k, v])),
    };
    counters.duplicates = 0;
    counters.rejected = 0;
    lastStepAt = now;

    let published = false;
    if (step % trainer.checkpointEvery === 0 || step >= trainer.maxSteps) {
      const publishStart = Date.now();
      const next = version + 1;
      await options.beforePublish?.(next);
      await writeLedger(checkpoints, {
        schemaVersion: 1,
        experimentId: config.experimentId,
        version: next,
        step,
        referenceVersion: ledger.referenceVersion,
        consumed: [...consumed],
        totals,
      });
      const numeric = Object.fromEntries(Object.entries(metrics).filter(([, v]) => Number.isFinite(v)));
      await saveCheckpoint(checkpoints, policy, {
        version: next,
        step,
        parent: version,
        metrics: numeric,
        tokenizerJson: loaded.tokenizerJson,
        optimizerState: trainer.saveOptimizerState,
      });
      const event: PolicyPublished = {
        schemaVersion: 1,
        experimentId: config.experimentId,
        version: next,
        key: versionPrefix(next),
        step,
        createdAt: new Date().toISOString(),
      };
      await events.send(JSON.stringify(event));
      version = next;
      published = true;
      unpublished.clear();
      const acks = pendingAcks;
      pendingAcks = [];
      for (const receipt of acks)
        await inbox.delete(receipt).catch((error: unknown) => {
          // an older receipt of a redelivered message is no longer valid; the newest one was deleted
          log.debug({ err: error }, "delete of an outdated receipt failed");
        });
      // After the manifest was written, so it lands in the metrics line only.
      metrics["time/publish_seconds"] = (Date.now() - publishStart) / 1000;
    }
    const line: StepMetrics = {
      schemaVersion: 1,
      experimentId: config.experimentId,
      step,
      version,
      time: new Date().toISOString(),
      elapsedSeconds: (Date.now() - startedAt) / 1000,
      metrics,
    };
    await options.metrics?.(line);
    options.onStep?.({ step, version, published, trajectories: trajectories.length, metrics });
    log.info(
      { step, version, trajectories: trajectories.length, loss, staleDropped: metrics["rollout/stale_dropped"] },
      "trainer step",
    );
  };

  const done = () =>
    signal.aborted ||
    step >= trainer.maxSteps ||
    (options.maxStepsThisRun !== undefined && stepsThisRun >= options.maxStepsThisRun);

  try {
    while (!done()) {
      let received: ReceivedMessage[] = [];
      try {
        received = await inbox.receive({ maxMessages: 10, waitSeconds: options.waitSeconds ?? 1 });
      } catch (error) {
        log.warn({ err: error }, "receive failed; retrying");
        await sleep(1000, signal);
      }
      for (const message of received) await receiveOne(message);
      if (received.length === 0) await sleep(50, signal);
      await keepAlive();
      // groups whose last member never came (dead-lettered): dropped, counted, acknowledged with the next step
      abandoned.push(...buffer.take(buffer.expiredGroups(Date.now(), trainer.groupTimeoutSeconds * 1000)));
      const complete = buffer.completeGroups();
      const firstStep = consumed.size === 0;
      const warmup = trainer.mode === "sync" ? 1 : trainer.warmupFactor;
      if (complete.length >= groupsNeeded(trainer.batchSize, warmup, firstStep)) {
        await trainOn(buffer.take(complete), abandoned.splice(0));
      }
    }
  } finally {
    reference?.dispose();
    policy.dispose();
  }
  log.info({ step, version, totals }, "trainer stopped");
  return { stepsThisRun, step, version, totals };
}
