import { join } from "node:path";
import { type Command, InvalidArgumentError, Option } from "commander";
import type { PoolStatus } from "../../functions/envpool/manager.ts";
import { CAPACITY_PROVIDER } from "../../shared/config/containerEnv.ts";
import { AgentRlError } from "../../shared/errors.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import { startRoleMetrics, withMetricsOptions } from "../metricsOptions.ts";
import { assertConfigFile } from "../options.ts";
import { exitOnStopSignal } from "../stopSignals.ts";
import { intOption, urlOption } from "./controller.ts";

interface PoolCliOptions {
  controller: string;
  task: string;
  driver: "process" | "ecs";
  config?: string;
  min?: number;
  max?: number;
  maxEpisodes?: number;
  maxAge?: number;
  warm?: number;
  exclusive?: boolean;
  concurrency?: number;
  tickMs: number;
  heartbeatMs: number;
  stateDir?: string;
  ecsCluster?: string;
  ecsTaskDefinition?: string;
  ecsContainer: string;
  ecsSubnets?: string[];
  ecsSecurityGroups?: string[];
  ecsCapacityProvider: string;
  metricsPort?: number;
  metricsHost?: string;
}

/** `agentrl env pool`: the env pool manager of one task (functions/envpool/). */
export function registerPool(env: Command): void {
  const pool = env
    .command("pool")
    .description(
      "launch, recycle and scale one task's env workers (child processes or ECS tasks) to match demand; " +
        "defaults come from the task's tasks.mix entry of --config",
    )
    .requiredOption("--controller <url>", "controller URL, e.g. http://127.0.0.1:5020", urlOption("--controller"))
    .requiredOption("--task <name>", "task the pool serves")
    .addOption(new Option("--driver <kind>", "where workers run").choices(["process", "ecs"]).default("process"))
    .option("--config <file>", "experiment config (YAML/JSON) whose tasks.mix entry gives the defaults")
    .option("--min <n>", "fewest workers (tasks.mix[].minWorkers)", intOption("--min", 0))
    .option("--max <n>", "most workers (tasks.mix[].maxWorkers)", intOption("--max", 1))
    .option(
      "--max-episodes <n>",
      "retire a worker after N sessions (tasks.mix[].maxEpisodes)",
      intOption("--max-episodes", 1),
    )
    .option("--max-age <s>", "retire a worker after S seconds (tasks.mix[].maxAgeSeconds)", intOption("--max-age", 1))
    .option("--warm <n>", "idle workers kept ready beyond demand (tasks.mix[].warmWorkers)", intOption("--warm", 0))
    .option("--exclusive", "one fresh worker per episode (tasks.mix[].exclusive)")
    .option("--concurrency <n>", "sessions per worker (tasks.mix[].concurrency)", intOption("--concurrency", 1))
    .option("--tick-ms <n>", "time between two decisions", intOption("--tick-ms", 50), 1_000)
    .option("--heartbeat-ms <n>", "heartbeat period of process workers", intOption("--heartbeat-ms", 10), 2_000)
    .option("--state-dir <dir>", "process driver: folder of worker pid files (a restarted pool adopts them)")
    .option("--ecs-cluster <name>", "ecs driver: cluster name or ARN")
    .option("--ecs-task-definition <td>", "ecs driver: the env task definition (family[:revision] or ARN)")
    .option("--ecs-container <name>", "ecs driver: container running the worker", "Role")
    .option("--ecs-subnets <ids>", "ecs driver: comma-separated subnet ids", listOption("--ecs-subnets"))
    .option(
      "--ecs-security-groups <ids>",
      "ecs driver: comma-separated security group ids",
      listOption("--ecs-security-groups"),
    )
    .addOption(
      new Option(
        "--ecs-capacity-provider <name>",
        "ecs driver: FARGATE, FARGATE_SPOT or the name of an EC2 capacity provider of the cluster",
      )
        .argParser(capacityProviderOption)
        .default("FARGATE"),
    );
  withMetricsOptions(pool).action(async (options: PoolCliOptions) => {
    const [{ loadConfig, TaskMixEntry }, { createLogger }, { PoolManager }] = await Promise.all([
      import("../../shared/config/index.ts"),
      import("../../shared/log.ts"),
      import("../../functions/envpool/manager.ts"),
    ]);
    if (options.config) assertConfigFile(options.config, "--config");
    const config = options.config ? await loadConfig(options.config) : undefined;
    const entry = config?.tasks.mix.find((e) => e.name === options.task) ?? TaskMixEntry.parse({ name: options.task });
    if (config && !config.tasks.mix.some((e) => e.name === options.task))
      throw new AgentRlError(
        `--task ${options.task} is not in the config's task mix (${config.tasks.mix.map((e) => e.name).join(", ")})`,
      );
    const minWorkers = options.min ?? entry.minWorkers;
    const maxWorkers = options.max ?? entry.maxWorkers;
    if (minWorkers > maxWorkers) throw new AgentRlError(`--min ${minWorkers} exceeds --max ${maxWorkers}`);
    const log = createLogger({ role: "envpool", task: options.task });
    const driver = await makeDriver(options, config?.experimentId ?? "default", log);
    const maxEpisodes = options.maxEpisodes ?? entry.maxEpisodes;
    const maxAgeSeconds = options.maxAge ?? entry.maxAgeSeconds;
    const { readSecrets } = await import("../../shared/security/secrets.ts");
    const { controllerSecret } = readSecrets();
    // With a config, queued rollout requests count as demand (this task's weight share of them),
    // as many as the rollout workers can start (this task's share of their episode slots).
    const transport = config
      ? await (await import("../../shared/transport/index.ts")).createRoleTransport(config, "envpool")
      : undefined;
    const { taskShare } = await import("../../functions/envpool/policy.ts");
    const totalWeight = config?.tasks.mix.reduce((sum, e) => sum + e.weight, 0) ?? 0;
    const requests = transport?.queue("rollout-requests");
    const manager = new PoolManager({
      task: options.task,
      controllerUrl: options.controller,
      ...(controllerSecret ? { controllerToken: controllerSecret } : {}),
      driver,
      minWorkers,
      maxWorkers,
      concurrency: options.concurrency ?? entry.concurrency,
      ...(maxEpisodes !== undefined ? { maxEpisodes } : {}),
      ...(maxAgeSeconds !== undefined ? { maxAgeSeconds } : {}),
      warmWorkers: options.warm ?? entry.warmWorkers,
      exclusive: options.exclusive ?? entry.exclusive,
      tickMs: options.tickMs,
      ...(requests && config
        ? {
            pendingDemand: async () =>
              taskShare((await requests.approximateDepth()).visible, entry.weight, totalWeight),
            startableSessions: taskShare(
              config.rollout.workers * config.rollout.concurrency,
              entry.weight,
              totalWeight,
            ),
          }
        : {}),
      log,
    });
    manager.start();
    const roleMetrics = await startRoleMetrics(`envpool-${options.task}`, options, log);
    if (roleMetrics) describePool(roleMetrics.metrics, manager);
    process.stdout.write(
      `${JSON.stringify({ event: "started", role: "envpool", task: options.task, driver: driver.kind, minWorkers, maxWorkers })}\n`,
    );
    exitOnStopSignal(
      async () => {
        await manager.close();
        await roleMetrics?.close();
        await transport?.close();
      },
      { log },
    );
  });
}

async function makeDriver(options: PoolCliOptions, experimentId: string, log: import("../../shared/log.ts").Logger) {
  if (options.driver === "process") {
    const { ProcessDriver } = await import("../../functions/envpool/processDriver.ts");
    const { tmpdir } = await import("node:os");
    return new ProcessDriver({
      task: options.task,
      controllerUrl: options.controller,
      stateDir: options.stateDir ?? join(tmpdir(), "agentrl-envpool", options.task),
      heartbeatMs: options.heartbeatMs,
      ...(options.config ? { configFile: options.config } : {}),
      log,
    });
  }
  const missing = (
    [
      ["--ecs-cluster", options.ecsCluster],
      ["--ecs-task-definition", options.ecsTaskDefinition],
      ["--ecs-subnets", options.ecsSubnets],
    ] as const
  )
    .filter(([, value]) => value === undefined)
    .map(([flag]) => flag);
  if (missing.length > 0 || !options.ecsCluster || !options.ecsTaskDefinition || !options.ecsSubnets)
    throw new AgentRlError(`--driver ecs needs ${missing.join(", ")}`);
  const [{ ECSClient }, { EcsDriver, sdkEcsCalls }] = await Promise.all([
    import("@aws-sdk/client-ecs"),
    import("../../functions/envpool/ecsDriver.ts"),
  ]);
  const endpoint = process.env.AGENTRL_AWS_ENDPOINT;
  // One attempt per SDK call: the driver's own backoff answers throttling.
  const client = new ECSClient({ maxAttempts: 1, ...(endpoint ? { endpoint } : {}) });
  return new EcsDriver({
    ecs: sdkEcsCalls(client),
    cluster: options.ecsCluster,
    taskDefinition: options.ecsTaskDefinition,
    containerName: options.ecsContainer,
    subnets: options.ecsSubnets,
    securityGroups: options.ecsSecurityGroups ?? [],
    capacityProvider: options.ecsCapacityProvider,
    experimentId,
    task: options.task,
    log,
  });
}

function capacityProviderOption(value: string): string {
  if (!CAPACITY_PROVIDER.test(value))
    throw new InvalidArgumentError(
      `--ecs-capacity-provider must be FARGATE, FARGATE_SPOT or a capacity provider name (letters, digits, '-', '_'), got "${value}"`,
    );
  return value;
}

function listOption(flag: string): (value: string) => string[] {
  return (value: string) => {
    const items = value
      .split(",")
      .map((s) => s.trim())
      .filter(Boolean);
    if (items.length === 0) throw new InvalidArgumentError(`${flag} must list at least one id, got "${value}"`);
    return items;
  };
}

/** The pool's workers by state, its target and its counters, read at scrape time. */
function describePool(metrics: ServiceMetrics, manager: { status(): PoolStatus }): void {
  metrics.gaugesOf("agentrl_envpool_workers", "pool workers by state", "state", () => manager.status().workers);
  metrics.gaugeOf("agentrl_envpool_desired_workers", "workers the pool aims for", () => manager.status().desired);
  for (const key of ["launches", "retirements", "scaleDowns", "replacements", "stops", "platformErrors"] as const)
    metrics.counterOf(
      `agentrl_envpool_${key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}_total`,
      `pool counter ${key} (see PoolStatus)`,
      () => manager.status().counters[key],
    );
}
