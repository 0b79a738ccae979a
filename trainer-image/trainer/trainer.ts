import { codecOfVersion } from "../../shared/chat/checkpoint.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import { initBackend } from "../../shared/model/backend.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { DataParallelTrainer } from "../../shared/model/dataParallel.ts";
import type { TransformerPolicy } from "../../shared/model/transformer.ts";
import { parseExperimentMessage } from "../../shared/protocol/envelope.ts";
import { TrajectoryEvent } from "../../shared/protocol/messages.ts";
import type { StepMetrics } from "../../shared/protocol/metrics.ts";
import type { PpoParams } from "../../shared/rl/ppo.ts";
import { seededRandomFrom } from "../../shared/rl/random.ts";
import { sleep } from "../../shared/sleep.ts";
import type { ReceivedMessage, Transport } from "../../shared/transport/types.ts";
import { prepareBatch } from "./batch.ts";
import { type BufferedGroup, entriesOf, GroupBuffer, groupsNeeded } from "./buffer.ts";
import {
  type Demonstration,
  type DemonstrationTrace,
  demonstrationsOfStep,
  demonstrationTokens,
  encodeDemonstrations,
} from "./demonstrations.ts";
import { hfPublisher } from "./hf-publish.ts";
import { addTotals, type Ledger, readLedger } from "./ledger.ts";
import { PoisonedTrajectories } from "./load.ts";
import { lossRows, trainOnRows } from "./loss.ts";
import { logpGap, type StepCounts, stepMetrics, stepTotals } from "./metrics.ts";
import ppoShardLoss from "./ppoShard.ts";
import { publishVersion } from "./publish.ts";
import { MIN_QUESTIONS, QuestionRenamer, renamedRows } from "./renamed.ts";
import { recordStep, StepRecorder } from "./stepRecord.ts";

/** The trainer cannot start (no checkpoint to train from, inconsistent state). */
export class TrainerError extends AgentRlError {
  override readonly name = "TrainerError";
}

/** The rollout/trainer log-prob agreement alarm fired and `trainer.stopOnLogpGap` is set. */
export class LogpGapError extends AgentRlError {
  override readonly name = "LogpGapError";
}

const LOGP_GAP_WARNING =
  "rollout/trainer log-prob gap above trainer.logpGapAlarm: the served policy and the trained one disagree on tokens of the same version";

/** What one finished step reports to `onStep`. */
export interface StepInfo {
  readonly step: number;
  /** Version of the weights after this step (every step makes one). */
  readonly version: number;
  /** Whether that version was published (every checkpointEvery-th, the last, and at shutdown). */
  readonly published: boolean;
  readonly trajectories: number;
  readonly metrics: Readonly<Record<string, number>>;
}

export interface TrainerOptions {
  /** Stops the loop between steps (the step in progress finishes and publishes first). */
  readonly signal?: AbortSignal;
  /**
   * Receives one metrics line per step (write it as JSONL), before the step's version is published.
   * After a restart, steps since the last published version are trained again and get new lines.
   */
  readonly metrics?: (line: StepMetrics) => void | Promise<void>;
  readonly onStep?: (info: StepInfo) => void;
  /** The step's distributions, after its metrics line: trajectory advantages and every trained token's staleness. */
  readonly distributions?: (
    step: number,
    values: { advantages: readonly number[]; staleness: readonly number[] },
  ) => void;
  /** Stop after this many steps in this process (tests, benchmarks); trainer.maxSteps still applies. */
  readonly maxStepsThisRun?: number;
  /** Long-poll wait of each receive, seconds. @default 1 */
  readonly waitSeconds?: number;
  /**
   * Successful expert episodes of the training split for `trainer.demonstrations` (the `agentrl
   * trainer` command collects them from the tasks' experts); needed when its coef is above 0.
   */
  readonly demonstrations?: readonly DemonstrationTrace[];
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
 * The learner (reference section 4) on the event pipeline: consumes TrajectoryReady (and
 * MemberDropped), buffers whole groups, and per step: loads the trajectories (claim-check),
 * applies the staleness bound per token, computes advantages (+ task normalization), runs the
 * PPO + KL loss through `TrainablePolicy.trainStep` (Adam, gradient clipping); every step is a
 * new version, and every checkpointEvery-th is published as `policies/v{N}/` (ledger first,
 * manifest last), then PolicyPublished, then the consumed messages are deleted.
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
  const imitation = trainer.demonstrations;
  let demonstrations: Demonstration[] = [];
  if (imitation.coef > 0) {
    const codec = await codecOfVersion(checkpoints, loaded.manifest);
    demonstrations = encodeDemonstrations(options.demonstrations ?? [], codec, config.policy.model.contextLength);
    if (demonstrations.length === 0) {
      policy.dispose();
      throw new TrainerError(
        `trainer.demonstrations.coef is ${imitation.coef} but there are no expert episodes to imitate (${options.demonstrations?.length ?? 0} given, none within the context); set it to 0 or run the trainer through \`agentrl trainer\`, which collects them from the tasks' experts`,
      );
    }
    log.info(
      { demonstrations: demonstrations.length, coef: imitation.coef, alone: imitation.alone },
      imitation.alone ? "expert demonstrations ready; the RL loss is left out" : "expert demonstrations ready",
    );
  }
  // renamed copies (trainer.renamedVariants) read the tasks' frame words from every step this
  // process trains, so a restarted trainer starts reading them afresh
  const renaming =
    trainer.renamedVariants > 0
      ? { renamer: new QuestionRenamer(), codec: await codecOfVersion(checkpoints, loaded.manifest) }
      : undefined;
  if (renaming)
    log.info(
      { renamedVariants: trainer.renamedVariants, minQuestions: MIN_QUESTIONS },
      `renamed copies on: a task's start once ${MIN_QUESTIONS} of its distinct questions were seen (renamed/rows)`,
    );
  let version = loaded.manifest.version;
  let publishedVersion = version;
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
  // Sync mode only (the config refuses more with async): there generation waits while this trains.
  const parallel = await DataParallelTrainer.start(policy, {
    threads: trainer.dataParallel,
    loss: ppoShardLoss,
    ...(reference ? { reference } : {}),
    log,
  }).catch((error: unknown) => {
    reference?.dispose();
    policy.dispose();
    throw error;
  });
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
  const hf = config.policy.exportHf ? hfPublisher(config.policy, { log }) : undefined;
  // External engines learn the version they serve only from the trainer: bring them (and their
  // sync records, which a crash mid-reload leaves at `loading`) to the version training starts
  // from, or a pool labelled by those records waits for a publish that needs its rollouts.
  if (hf && config.policy.syncEngines.length > 0)
    await hf
      .resync(checkpoints, publishedVersion)
      .catch((error: unknown) => log.error({ err: error, version: publishedVersion }, "engine resync at start failed"));

  const counters = { duplicates: 0, rejected: 0 };
  const abandoned: BufferedGroup[] = [];
  // a trajectory that cannot be loaded fails its own message (to the DLQ), never the trainer
  const poisoned = new PoisonedTrajectories(inbox, log);
  const loadTrajectories = (groups: readonly BufferedGroup[]) => poisoned.loadGroups(trajectoryStore, groups);

  const receiveOne = async (message: ReceivedMessage): Promise<void> => {
    let event: TrajectoryEvent;
    try {
      event = parseExperimentMessage(TrajectoryEvent, message.body, "TrajectoryReady", config.experimentId);
    } catch (error) {
      counters.rejected += 1;
      await inbox.fail(message.receiptHandle, describeError(error));
      return;
    }
    if (await poisoned.refail(event.trajectoryId, message.receiptHandle)) return;
    if (consumed.has(event.trajectoryId)) {
      // already trained (or dropped): acknowledge once the ledger holding it is published
      counters.duplicates += 1;
      if (unpublished.has(event.trajectoryId)) pendingAcks.push(message.receiptHandle);
      else await inbox.delete(message.receiptHandle);
      return;
    }
    const added =
      "kind" in event ? buffer.drop(event, message.receiptHandle) : buffer.add(event, message.receiptHandle);
    if (added === "redelivered") counters.duplicates += 1;
  };

  const keepAlive = async (): Promise<void> => {
    if (Date.now() - lastKeepAlive < (visibility * 1000) / 3) return;
    lastKeepAlive = Date.now();
    const waiting = abandoned.flatMap((g) => entriesOf(g).map((m) => m.receiptHandle));
    for (const receipt of [...buffer.receipts(), ...waiting, ...pendingAcks])
      await inbox.changeVisibility(receipt, visibility).catch(() => {});
  };

  /** Marks the step's groups consumed; their messages are acknowledged once a version holding them is published. */
  const consume = (groups: readonly BufferedGroup[]): void => {
    for (const group of groups)
      for (const [id, entry] of [...group.members, ...group.dropped]) {
        consumed.add(id);
        unpublished.add(id);
        pendingAcks.push(entry.receiptHandle, ...entry.olderReceipts);
      }
  };

  /** How long this process's last publish took; it goes into the next step's metrics line. */
  let previousPublishSeconds: number | undefined;

  const publish = async (metrics: Record<string, number>): Promise<void> => {
    const publishStart = Date.now();
    await options.beforePublish?.(version);
    const ledgerOfVersion: Ledger = {
      schemaVersion: 1,
      experimentId: config.experimentId,
      version,
      step,
      referenceVersion: ledger.referenceVersion,
      consumed: [...consumed],
      totals,
    };
    await publishVersion({
      checkpoints,
      events,
      policy,
      ledger: ledgerOfVersion,
      parent: publishedVersion,
      metrics,
      tokenizerJson: loaded.tokenizerJson,
      saveOptimizerState: trainer.saveOptimizerState,
      ...(hf ? { hf, onHfError: (err: unknown) => log.error({ err }, "export-hf failed") } : {}),
    });
    publishedVersion = version;
    unpublished.clear();
    const acks = pendingAcks;
    pendingAcks = [];
    for (const receipt of acks)
      await inbox.delete(receipt).catch((error: unknown) => {
        // an older receipt of a redelivered message is no longer valid; the newest one was deleted
        log.debug({ err: error }, "delete of an outdated receipt failed");
      });
    previousPublishSeconds = (Date.now() - publishStart) / 1000;
    log.info({ version, seconds: previousPublishSeconds }, "published");
  };

  /** One step: load -> prepareBatch -> log-probs -> trainStep -> metrics -> publish. */
  const trainOn = async (groups: BufferedGroup[], dropped: BufferedGroup[]): Promise<void> => {
    const stepStart = Date.now();
    const { trajectories, missing } = await loadTrajectories(groups);
    const batch = prepareBatch(trajectories, version, trainer, config.policy.model.contextLength);
    const rows = await lossRows(
      batch,
      (sequences, which) => parallel.logProbs(sequences, temperature, which),
      reference !== undefined,
      trainer,
    );
    const recorder = new StepRecorder(); // the trainer's log-probs, for the step record `agentrl view` shows
    const imitated =
      demonstrations.length > 0 ? demonstrationsOfStep(demonstrations, imitation.perStep, config.seed, step + 1) : [];
    renaming?.renamer.observe(trajectories);
    const renamed = renaming
      ? renamedRows(batch, trajectories, renaming.renamer, renaming.codec, {
          count: trainer.renamedVariants,
          contextLength: config.policy.model.contextLength,
          random: seededRandomFrom(config.seed, "renamed-variants", step + 1),
          trainer,
        })
      : undefined;
    const result = await trainOnRows(
      parallel,
      batch,
      rows,
      temperature,
      params,
      (error) => log.error({ err: error }, "optimizer step skipped"),
      { recorder, demonstrations: { of: imitated, coef: imitation.coef, alone: imitation.alone }, renamed },
    );
    step += 1;
    stepsThisRun += 1;
    version += 1; // every step makes new weights, and so a new version, published or not
    consume([...groups, ...dropped]);
    const gap = logpGap(batch, trajectories, result);
    const alarm = gap.mean > trainer.logpGapAlarm;
    const now = Date.now();
    const counts: StepCounts = {
      trajectories,
      batch,
      result,
      logpGapFresh: gap.mean,
      logpGapAlarm: alarm,
      groups,
      abandoned: dropped,
      missing,
      ...counters,
      buffered: buffer.trajectoryCount,
      secondsSinceLastStep: (now - lastStepAt) / 1000,
      stepSeconds: (now - stepStart) / 1000,
      ...(imitated.length > 0 ? { demonstrationTokens: demonstrationTokens(imitated) } : {}),
      ...(renamed ? { renamed } : {}),
    };
    addTotals(totals, stepTotals(counts));
    const metrics = stepMetrics(counts, totals);
    metrics["time/step_record_seconds"] = await recordStep(trajectoryStore, {
      experimentId: config.experimentId,
      step,
      trainedVersion: version - 1,
      trainer,
      params,
      trajectories,
      contextLength: config.policy.model.contextLength,
      batch,
      rowInputs: rows,
      groups,
      abandoned: dropped,
      losses: {
        total: result.loss,
        policy: metrics["loss/policy"] as number,
        kl: metrics["loss/kl"] as number,
        clipFrac: metrics["policy/clip_frac"] as number,
        gradNorm: result.gradNorm,
        skipped: result.skipped,
      },
      recorder,
    });
    counters.duplicates = 0;
    counters.rejected = 0;
    lastStepAt = now;
    if (alarm) log.warn({ step, gap: gap.mean, alarm: trainer.logpGapAlarm, worst: gap.worst }, LOGP_GAP_WARNING);
    const stopping = alarm && trainer.stopOnLogpGap;
    const published =
      !stopping && (version % trainer.checkpointEvery === 0 || step >= trainer.maxSteps || signal.aborted);
    if (previousPublishSeconds !== undefined) metrics["time/previous_publish_seconds"] = previousPublishSeconds;
    // The line goes out before the publish: a trainer killed in between has written the line of a
    // step it will train again after its restart (readers keep the last line per step), whereas the
    // other order lost the line of a version that was published.
    await options.metrics?.({
      schemaVersion: 1,
      experimentId: config.experimentId,
      step,
      version,
      time: new Date().toISOString(),
      elapsedSeconds: (Date.now() - startedAt) / 1000,
      metrics,
    });
    options.distributions?.(step, { advantages: batch.trajectoryAdvantages, staleness: batch.staleness });
    if (published) await publish(metrics);
    options.onStep?.({ step, version, published, trajectories: trajectories.length, metrics });
    log.info({ step, version, published, trajectories: trajectories.length, loss: result.loss }, "trainer step");
    if (stopping)
      throw new LogpGapError(
        `policy/logp_gap_fresh ${gap.mean.toPrecision(3)} exceeds trainer.logpGapAlarm ${trainer.logpGapAlarm} at step ${step} (worst: trajectory ${gap.worst?.trajectoryId} at ${gap.worst?.gap.toPrecision(3)}); the served policy's log-probs do not match the trained one's (tokenization, numerics or version labels). Stopped because trainer.stopOnLogpGap is set; step ${step} was not published.`,
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
    await parallel.close();
    reference?.dispose();
    policy.dispose();
  }
  log.info({ step, version, totals }, "trainer stopped");
  return { stepsThisRun, step, version, totals };
}
