import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import { nodeFlagsForThreads } from "../../shared/model/dataParallelFlags.ts";
import { checkpointFolderStore } from "../../shared/model/hf/base.ts";
import { copyVersion, newestVersion, versionPrefix } from "../../shared/protocol/checkpoints.ts";
import type { EvalReport, StepMetrics } from "../../shared/protocol/metrics.ts";
import { secretEnv, withGeneratedSecrets } from "../../shared/security/secrets.ts";
import { openTrackers } from "../../shared/tracking/index.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";
import { evalComparisonMarkdown, readMetrics, writeRunReport } from "../report/report.ts";
import { evalTasks, runEval, samplingSuffix } from "./eval.ts";
import { startPolicyServer } from "./policy.ts";
import { nicenessFor, RoleNiceness } from "./priority.ts";
import type { ProgressView } from "./progress.ts";
import { startEnvStack, stopLeftoverPoolWorkers } from "./stack.ts";
import { Supervisor } from "./supervisor.ts";

/** The committed warm-up checkpoint (policies/v0/), imported when a run's store has no version. */
export const BASE_CHECKPOINT_DIR = fileURLToPath(new URL("../../trainer-image/base-policy", import.meta.url));

/** Restarts allowed per stateless-process role before a crash ends the run. */
const ROLE_RESTARTS = 3;

export interface PipelineOptions {
  readonly config: ExperimentConfig;
  /** Folder of this run: config.json, logs/, metrics.jsonl, eval-*.json, report.html (and the local transport). */
  readonly runDir: string;
  /** Folder laid out as a store holding policies/v0/; imported when the checkpoint store is empty. */
  readonly baseCheckpoint?: string;
  /** Ctrl-C: stops every role cleanly and writes the report of what ran. */
  readonly signal?: AbortSignal;
  readonly log?: Logger;
  readonly progress?: ProgressView;
  /** Restarts allowed per role (every role: servers come back on their port). @default 3 */
  readonly roleRestarts?: number;
  /** The controller cancels sessions idle this long (those of a crashed rollout worker). @default 240000 */
  readonly sessionIdleMs?: number;
  /**
   * CPU priorities: niceness added per role over the launcher's own (cli/launch/priority.ts).
   * Async mode only, where the trainer and generation compete for the CPU; sync runs them in
   * turn, so there a nicer trainer would only yield to other programs.
   * @default - every role at +0 (see cli/launch/priority.ts for why)
   */
  readonly niceness?: Partial<RoleNiceness>;
  /** Runs once training has ended and the rollout side has stopped, while the env stack still runs (checks). */
  readonly afterTraining?: (run: { readonly controllerUrl: string; readonly controllerToken: string }) => Promise<void>;
}

export interface PipelineResult {
  readonly runDir: string;
  readonly reportFile: string;
  readonly steps: number;
  readonly newestVersion: number | undefined;
  readonly evals: EvalReport[];
  readonly interrupted: boolean;
}

/**
 * Runs one experiment with every role as a child process: controller and env pools (which
 * launch and recycle the env workers), policy
 * servers (current, and stale when cross-policy sampling uses it), trainer, feeder and rollout
 * workers, on the configured transport (local directory + SQLite by default, or SQS/S3 at an
 * endpoint). Ends when the trainer has run `trainer.maxSteps`, then evaluates the base and the
 * newest version on held-out instances and writes the report.
 */
export async function runPipeline(options: PipelineOptions): Promise<PipelineResult> {
  const runDir = resolve(options.runDir);
  mkdirSync(runDir, { recursive: true });
  const config = withRunTransport(options.config, runDir);
  const configFile = join(runDir, "config.json");
  writeFileSync(configFile, `${JSON.stringify(config, null, 2)}\n`);
  const log = options.log ?? createLogger({ role: "pipeline", experimentId: config.experimentId });
  const started = Date.now();
  const restarts = options.roleRestarts ?? ROLE_RESTARTS;

  const transport = await createTransport(config.transport, {
    onEndpointWait: (reason) =>
      log.warn(
        { endpoint: config.transport.endpoint, reason, waitSeconds: config.transport.endpointWaitSeconds },
        "waiting for the AWS endpoint to accept connections",
      ),
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const checkpoints = transport.store("checkpoints");
  // Every role of the run shares fresh secrets unless the environment sets them (AGENTRL_ENV_SECRET, ...).
  const secrets = withGeneratedSecrets();
  const niceness = RoleNiceness.parse(options.niceness ?? {});
  const supervisor = new Supervisor(
    runDir,
    { ...process.env, ...secretEnv(secrets) },
    { nicenessOf: (name) => nicenessFor(niceness, name) },
  );
  const abort = () => void supervisor.stopAll();
  options.signal?.addEventListener("abort", abort, { once: true });
  let interrupted = false;
  const evals: EvalReport[] = [];
  try {
    const baseVersion = await ensureBaseVersion(
      checkpoints,
      options.baseCheckpoint,
      config.policy.backend,
      supervisor,
      configFile,
      log,
    );
    const metricsFile = join(runDir, "metrics.jsonl");
    // These roles keep their state in the queues and stores, so a crashed one is restarted and
    // resumes: the trainer from its newest checkpoint and ledger, the feeder from its cursor, a
    // rollout worker from the messages that come back after their visibility timeout. The trainer
    // needs only the stores, so it loads its model while the servers start.
    supervisor.start({
      name: "trainer",
      args: ["trainer", "--config", configFile, "--metrics", metricsFile],
      nodeFlags: nodeFlagsForThreads(config.trainer.dataParallel),
      primary: true,
      maxRestarts: restarts,
    });
    // The env stack and the policy servers need nothing of each other: they start side by side.
    const servers = { configFile, maxRestarts: restarts };
    const cross = config.rollout.crossPolicy;
    const [controllerUrl, currentUrl, staleUrl] = await Promise.all([
      startEnvStack(supervisor, {
        ...(config.tasks.controllerUrl ? { controllerUrl: config.tasks.controllerUrl } : {}),
        tasks: config.tasks.mix.map((t) => ({ name: t.name, concurrency: t.concurrency })),
        workerRestarts: restarts,
        controllerRestarts: restarts,
        controllerToken: secrets.controllerSecret,
        configFile,
        ...(options.sessionIdleMs ? { sessionIdleMs: options.sessionIdleMs } : {}),
        pools: {
          stateDir: join(runDir, "envpool"),
          idleTasks: config.tasks.mix.filter((t) => t.minWorkers === 0).map((t) => t.name),
        },
      }),
      startPolicyServer(supervisor, { ...servers, name: "policy-current", pool: "current" }),
      cross.enabled && cross.staleProbability > 0
        ? startPolicyServer(supervisor, { ...servers, name: "policy-stale", pool: "stale" })
        : undefined,
    ]);
    const gatewayUrl = await startGatewayRole(supervisor, {
      config,
      configFile,
      runDir,
      currentUrl,
      staleUrl,
      restarts,
      adminKey: secrets.gatewayAdminKey,
      log,
    });
    // gateway.exclusive: only agents' gateway sessions train the policy
    const rolloutWorkers = config.gateway.exclusive && gatewayUrl ? 0 : config.rollout.workers;
    if (rolloutWorkers > 0)
      supervisor.start({ name: "feeder", args: ["feeder", "--config", configFile], maxRestarts: restarts });
    for (let i = 0; i < rolloutWorkers; i++) {
      const urls = ["--controller-url", controllerUrl, "--current-url", currentUrl];
      if (staleUrl) urls.push("--stale-url", staleUrl);
      supervisor.start({
        name: `rollout-${i}`,
        args: ["rollout", "--config", configFile, ...urls],
        maxRestarts: restarts,
      });
    }
    log.info({ runDir, controllerUrl, currentUrl, staleUrl, gatewayUrl }, "pipeline running");
    options.progress?.start(config);
    const watcher = watchMetrics(metricsFile, (records) => options.progress?.update(records));
    try {
      await supervisor.guard(supervisorExitOrAbort(supervisor, options.signal));
    } finally {
      watcher.stop();
      options.progress?.update(await readMetrics(metricsFile));
      options.progress?.stop();
    }
    interrupted = options.signal?.aborted ?? false;
    if (!interrupted) {
      const producers = Array.from({ length: rolloutWorkers }, (_, i) => `rollout-${i}`);
      if (rolloutWorkers > 0) producers.unshift("feeder");
      if (gatewayUrl) producers.push("gateway");
      for (const role of producers) await supervisor.stop(role);
      await options.afterTraining?.({ controllerUrl, controllerToken: secrets.controllerSecret });
      await Promise.all([supervisor.stop("policy-current"), staleUrl ? supervisor.stop("policy-stale") : undefined]);
      const newest = await newestVersion(checkpoints);
      const evaluation = config.evaluation;
      if (evaluation.instances > 0 && newest !== undefined) {
        const tasks = await evalTasks(
          config.tasks.mix.map((t) => t.name),
          "test",
          evaluation.instances,
        );
        const sampling = samplingSuffix(evaluation);
        const versions = newest === baseVersion ? [baseVersion] : [baseVersion, newest];
        // Both servers start at once (the second loads while the first is evaluated); one evaluation at a time.
        const evalServers = versions.map((version) =>
          startPolicyServer(supervisor, { name: `policy-eval-v${version}`, configFile, pool: "pinned", version }),
        );
        for (const server of evalServers) server.catch(() => undefined); // each is awaited in its turn below
        for (const [i, version] of versions.entries()) {
          const policyUrl = await supervisor.guard(evalServers[i] as Promise<string>);
          evals.push(
            await supervisor.guard(
              runEval({
                controllerUrl,
                policyUrl,
                policyApiKey: secrets.policyApiKey,
                controllerToken: secrets.controllerSecret,
                label: `${version === baseVersion ? `v${version} (base)` : `v${version}`}${sampling}`,
                tasks,
                sampling: evaluation,
                split: "test",
                maxTokensPerTurn: config.rollout.maxTokensPerTurn,
                concurrency: 16,
                outDir: runDir,
                log,
              }),
            ),
          );
          await supervisor.stop(`policy-eval-v${version}`);
        }
      }
    }
  } catch (error) {
    // A stop while the roles start (or evaluate) ends the roles it waits on: their exits are the
    // stop's doing, so the run ends as interrupted rather than failed.
    if (!options.signal?.aborted) throw error;
    interrupted = true;
  } finally {
    options.signal?.removeEventListener("abort", abort);
    await supervisor.stopAll();
    if (!config.tasks.controllerUrl)
      await stopLeftoverPoolWorkers(
        join(runDir, "envpool"),
        config.tasks.mix.map((t) => t.name),
        log,
      );
    await transport.tidy(); // every role has stopped: no write is under way
    await transport.close();
  }
  const records = await readMetrics(join(runDir, "metrics.jsonl"));
  const newest = records.at(-1)?.version;
  const reportFile = await writeRunReport(runDir, evals, [
    ["experiment", config.experimentId],
    ["mode", config.trainer.mode],
    ["tasks", config.tasks.mix.map((t) => t.name).join(", ")],
    ["trainer steps", `${records.length} of ${config.trainer.maxSteps}${interrupted ? " (interrupted)" : ""}`],
    ["newest version", newest === undefined ? "none" : `v${newest}`],
    ["wall time", `${((Date.now() - started) / 60_000).toFixed(1)} min`],
    [
      "transport",
      config.transport.kind === "local"
        ? `local (${config.transport.localDir})`
        : `aws (${config.transport.endpoint ?? "AWS"})`,
    ],
  ]);
  if (evals.length > 0) {
    writeFileSync(join(runDir, "eval.md"), `${evalComparisonMarkdown(evals)}\n`);
    await trackEvaluation(config, runDir, records.at(-1)?.step ?? 0, evals, interrupted, log);
  }
  return { runDir, reportFile, steps: records.length, newestVersion: newest, evals, interrupted };
}

/**
 * `gateway.port` set: starts `agentrl gateway` in front of the run's policy pool and returns its
 * URL. The admin key comes from AGENTRL_GATEWAY_ADMIN_KEY; when that is unset the run's generated
 * key is written to <runDir>/gateway-admin.key (mode 0600), never to a log.
 */
async function startGatewayRole(
  supervisor: Supervisor,
  run: {
    readonly config: ExperimentConfig;
    readonly configFile: string;
    readonly runDir: string;
    readonly currentUrl: string;
    readonly staleUrl: string | undefined;
    readonly restarts: number;
    /** The key every role of the run was given (AGENTRL_GATEWAY_ADMIN_KEY, or generated). */
    readonly adminKey: string;
    readonly log: Logger;
  },
): Promise<string | undefined> {
  const { config, configFile, runDir, currentUrl, staleUrl, restarts, log } = run;
  if (config.gateway.port === undefined) return undefined;
  if (!process.env.AGENTRL_GATEWAY_ADMIN_KEY) {
    writeFileSync(join(runDir, "gateway-admin.key"), `${run.adminKey}\n`, { mode: 0o600 });
    log.info(
      { file: join(runDir, "gateway-admin.key") },
      "gateway admin key written (AGENTRL_GATEWAY_ADMIN_KEY was unset)",
    );
  }
  const args = ["gateway", "--config", configFile, "--current-url", currentUrl];
  if (staleUrl) args.push("--stale-url", staleUrl);
  supervisor.start({ name: "gateway", args, maxRestarts: restarts });
  const url = await supervisor.guard(supervisor.urlOf("gateway", 120_000));
  log.info({ url }, "gateway listening: POST /v1/sessions with the admin key");
  return url;
}

/** The local transport of a run lives in its folder unless the config names another place. */
export function withRunTransport(config: ExperimentConfig, runDir: string): ExperimentConfig {
  if (config.transport.kind !== "local" || config.transport.localDir !== ".agentrl/transport") return config;
  return { ...config, transport: { ...config.transport, localDir: join(runDir, "transport") } };
}

/** Copies a base into `store` as v0: version 0 of a checkpoint folder, or a Hugging Face folder imported (with hf.json). */
export async function importBase(
  store: ObjectStore,
  baseCheckpoint: string,
  backend: ExperimentConfig["policy"]["backend"],
): Promise<void> {
  await copyVersion(await checkpointFolderStore(baseCheckpoint, backend), store, 0);
}

/** Makes sure version 0 (or some version) exists: import the committed base, else run the SFT warm-up. */
async function ensureBaseVersion(
  store: ObjectStore,
  baseCheckpoint: string | undefined,
  backend: ExperimentConfig["policy"]["backend"],
  supervisor: Supervisor,
  configFile: string,
  log: Logger,
): Promise<number> {
  const existing = await newestVersion(store);
  if (existing !== undefined) return (await listBaseVersion(store)) ?? existing;
  if (baseCheckpoint && existsSync(baseCheckpoint)) {
    await importBase(store, baseCheckpoint, backend);
    log.info({ from: baseCheckpoint }, "imported the base checkpoint as v0");
    return 0;
  }
  log.info("no base checkpoint: running the SFT warm-up (agentrl sft --store)");
  supervisor.start({ name: "sft", args: ["sft", "--store", "--config", configFile], primary: true });
  const exit = await supervisor.guard(supervisor.exitOf("sft"));
  if (exit.code !== 0) throw new Error(`sft failed (code ${exit.code}); see logs/sft.log`);
  return 0;
}

async function listBaseVersion(store: ObjectStore): Promise<number | undefined> {
  const keys = await store.list(`${versionPrefix(0)}manifest.json`);
  return keys.length > 0 ? 0 : undefined;
}

function supervisorExitOrAbort(supervisor: Supervisor, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    void supervisor.exitOf("trainer").then(() => resolve());
    signal?.addEventListener("abort", () => resolve(), { once: true });
  });
}

/** Re-reads metrics.jsonl every 2 s and hands the records to `onRecords`. */
function watchMetrics(file: string, onRecords: (records: StepMetrics[]) => void): { stop(): void } {
  let last = "";
  const timer = setInterval(() => {
    void readFile(file, "utf8")
      .then(async (text) => {
        if (text === last) return;
        last = text;
        onRecords(await readMetrics(file));
      })
      .catch(() => {});
  }, 2_000);
  return { stop: () => clearInterval(timer) };
}

/**
 * The closing evaluation in the run's trackers, at the last trainer step: the comparison table as
 * text (TensorBoard's text tab) and the newest policy's success per task as `eval/<task>/success`.
 * The trainer has ended its tracker run by then; MLflow's is continued (trackers.json) and ended again.
 */
async function trackEvaluation(
  config: ExperimentConfig,
  runDir: string,
  step: number,
  evals: readonly EvalReport[],
  interrupted: boolean,
  log: Logger,
): Promise<void> {
  // where the trainer wrote (the trajectory bucket on the AWS transport), so TensorBoard shows one run
  const transport = config.transport.kind === "aws" ? await createTransport(config.transport) : undefined;
  const tracker = openTrackers(config.tracking, {
    runFolder: runDir,
    runName: config.experimentId,
    env: process.env,
    warn: (message) => log.warn(message),
    ...(transport ? { tensorboardStore: transport.store("trajectories") } : {}),
  });
  tracker.text(step, "evaluation", evalComparisonMarkdown(evals));
  const newest = evals.at(-1);
  if (newest)
    tracker.scalars(step, {
      ...Object.fromEntries(newest.tasks.map((t) => [`eval/${t.task}/success`, t.success])),
      "eval/avg/success": newest.averageSuccess,
    });
  await tracker.finish(interrupted ? "FAILED" : "FINISHED");
  await transport?.close();
}
