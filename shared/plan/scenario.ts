import type { Calibration, PriceEntry, TaskCost } from "./calibration.ts";
import { type PipelinePlan, type PipelineResult, simulatePipeline, type TaskPlan } from "./pipeline.ts";

/**
 * From a scenario (what `agentrl plan` reads from the config and its flags) and the calibration
 * to a PipelinePlan, and from a result to the bill: the simulation itself is shared/plan/pipeline.ts.
 */

export interface ScenarioTask {
  readonly name: string;
  readonly weight: number;
  readonly envWorkers: number;
  readonly sessionsPerWorker: number;
  readonly exclusive: boolean;
  /** Calibration task entry; @default the task's name, else "default" */
  readonly cost?: string;
}

export interface Scenario {
  readonly mode: "async" | "sync";
  readonly groupSize: number;
  readonly batchGroups: number;
  readonly windowGroups: number;
  readonly firstStepGroups: number;
  readonly maxStaleness: number;
  readonly checkpointEvery: number;
  readonly rolloutSlots: number;
  /** Rollout worker processes (billed); @default rolloutSlots / calibration.cpu.rolloutSlotsPerWorker */
  readonly rolloutWorkers?: number;
  readonly controllers: number;
  readonly tasks: readonly ScenarioTask[];
  readonly policyServers: number;
  readonly trainerDevices: number;
  /** Calibration decode and trainer profiles. */
  readonly decode: string;
  readonly trainer: string;
  readonly seed: number;
  readonly steps: number;
  readonly warmupSteps: number;
  readonly maxEvents?: number;
  /** Fixed env delays (see PipelinePlan.delayMs). */
  readonly delayMs?: PipelinePlan["delayMs"];
}

function taskCost(calibration: Calibration, task: ScenarioTask): TaskCost {
  const key = task.cost ?? (task.name in calibration.tasks ? task.name : "default");
  const cost = calibration.tasks[key];
  if (!cost)
    throw new RangeError(
      `calibration has no task entry "${key}" for task ${task.name}; it has: ${Object.keys(calibration.tasks).join(", ")}`,
    );
  return cost;
}

function profile<T>(table: Record<string, T>, key: string, what: string): T {
  const found = table[key];
  if (found === undefined)
    throw new RangeError(`calibration has no ${what} profile "${key}"; it has: ${Object.keys(table).join(", ")}`);
  return found;
}

export function planOf(scenario: Scenario, calibration: Calibration): PipelinePlan {
  const tasks: TaskPlan[] = scenario.tasks.map((t) => ({
    name: t.name,
    weight: t.weight,
    envWorkers: t.envWorkers,
    sessionsPerWorker: t.sessionsPerWorker,
    exclusive: t.exclusive,
    cost: taskCost(calibration, t),
  }));
  return {
    mode: scenario.mode,
    groupSize: scenario.groupSize,
    batchGroups: scenario.batchGroups,
    windowGroups: scenario.windowGroups,
    firstStepGroups: scenario.firstStepGroups,
    maxStaleness: scenario.maxStaleness,
    checkpointEvery: scenario.checkpointEvery,
    rolloutSlots: scenario.rolloutSlots,
    controllers: scenario.controllers,
    controllerReqPerS: calibration.controller.saturationReqPerS,
    tasks,
    policyServers: scenario.policyServers,
    decode: profile(calibration.decode, scenario.decode, "decode"),
    trainerDevices: scenario.trainerDevices,
    trainer: profile(calibration.trainer, scenario.trainer, "trainer"),
    rolloutOverheadMs: calibration.rollout.overheadMsPerEpisode,
    feederPollMs: calibration.feeder.pollMs,
    queueLatencyMs: calibration.queue.latencyMs,
    storePutMs: calibration.store.putMs,
    policyPollSeconds: calibration.policyPollSeconds,
    launchPerS: calibration.aws.limits.fargateLaunchPerS.value,
    seed: scenario.seed,
    steps: scenario.steps,
    warmupSteps: scenario.warmupSteps,
    ...(scenario.maxEvents === undefined ? {} : { maxEvents: scenario.maxEvents }),
    ...(scenario.delayMs === undefined ? {} : { delayMs: scenario.delayMs }),
  };
}

export interface CostLine {
  readonly item: string;
  readonly count: number;
  readonly instance: string;
  readonly onDemandPerHour: number;
  readonly spotPerHour: number;
}

export interface Bill {
  readonly lines: readonly CostLine[];
  readonly onDemandPerHour: number;
  readonly spotPerHour: number;
  /** $ per 1M trajectories at the simulated rate. */
  readonly onDemandPer1M: number;
  readonly spotPer1M: number;
}

function price(calibration: Calibration, instance: string): PriceEntry {
  return profile(calibration.aws.prices, instance, "price-table");
}

/** The hourly bill of a scenario at the simulated rates, on demand and spot. */
export function billOf(scenario: Scenario, calibration: Calibration, result: PipelineResult): Bill {
  const cpu = calibration.cpu;
  const cpuPrice = price(calibration, cpu.instance);
  const perVcpu = (p: number) => p / cpuPrice.vcpus;
  const envWorkers = scenario.tasks.reduce((sum, t) => sum + t.envWorkers, 0);
  const rolloutWorkers = scenario.rolloutWorkers ?? Math.ceil(scenario.rolloutSlots / cpu.rolloutSlotsPerWorker);
  const cpuLine = (item: string, count: number, vcpus: number): CostLine => ({
    item,
    count,
    instance: `${cpu.instance} per vCPU`,
    onDemandPerHour: count * vcpus * perVcpu(cpuPrice.onDemandPerHour),
    spotPerHour: count * vcpus * perVcpu(cpuPrice.spotPerHour),
  });
  const decode = profile(calibration.decode, scenario.decode, "decode");
  const trainer = profile(calibration.trainer, scenario.trainer, "trainer");
  const gpuLine = (item: string, devices: number, instance: string, perInstance: number): CostLine => {
    const p = price(calibration, instance);
    const instances = Math.ceil(devices / perInstance);
    return {
      item,
      count: devices,
      instance: `${instances} x ${instance}`,
      onDemandPerHour: instances * p.onDemandPerHour,
      spotPerHour: instances * p.spotPerHour,
    };
  };
  const req = calibration.aws.requests;
  const hour = 3600;
  const requestsPerHour =
    result.rates.sqsCallsPerS * hour * (req.sqsPerMillion / 1e6) +
    result.rates.trajectoryPutsPerS * hour * (req.s3PutPerThousand / 1e3) +
    result.rates.trajectoryGetsPerS * hour * (req.s3GetPerThousand / 1e3);
  const lines: CostLine[] = [
    cpuLine("env workers", envWorkers, cpu.envWorkerVcpus),
    cpuLine("rollout workers", rolloutWorkers, cpu.rolloutWorkerVcpus),
    cpuLine("controllers + feeder", scenario.controllers + 1, cpu.controllerVcpus),
    gpuLine("policy servers", scenario.policyServers, decode.instance, decode.serversPerInstance),
    gpuLine("trainer", scenario.trainerDevices, trainer.instance, trainer.devicesPerInstance),
    {
      item: "SQS + S3 requests",
      count: 1,
      instance: "requests",
      onDemandPerHour: requestsPerHour,
      spotPerHour: requestsPerHour,
    },
  ];
  const onDemandPerHour = lines.reduce((sum, l) => sum + l.onDemandPerHour, 0);
  const spotPerHour = lines.reduce((sum, l) => sum + l.spotPerHour, 0);
  const perMillion = (perHour: number) =>
    result.trajectoriesPerS > 0 ? (perHour / (result.trajectoriesPerS * hour)) * 1e6 : Number.POSITIVE_INFINITY;
  return {
    lines,
    onDemandPerHour,
    spotPerHour,
    onDemandPer1M: perMillion(onDemandPerHour),
    spotPer1M: perMillion(spotPerHour),
  };
}

export interface LimitUse {
  readonly limit: string;
  readonly rate: number;
  readonly value: number;
  readonly share: number;
  readonly source: string;
}

/** The simulated rates against AWS's service limits (shares of each limit). */
export function limitsOf(scenario: Scenario, calibration: Calibration, result: PipelineResult): LimitUse[] {
  const l = calibration.aws.limits;
  const use = (limit: string, rate: number, entry: { value: number; source: { ref: string } }): LimitUse => ({
    limit,
    rate,
    value: entry.value,
    share: rate / entry.value,
    source: entry.source.ref,
  });
  // every trajectory of an experiment is put under trajectories/<experimentId>/: one prefix until S3 partitions it
  return [
    use("S3 PUT/s on trajectories/<experiment>/", result.rates.trajectoryPutsPerS, l.s3PutPerPrefixPerS),
    use("S3 GET/s on trajectories/<experiment>/", result.rates.trajectoryGetsPerS, l.s3GetPerPrefixPerS),
    use("SQS in-flight messages (rollout-requests)", scenario.windowGroups * scenario.groupSize, l.sqsInFlightPerQueue),
    use("SQS API calls/s", result.rates.sqsCallsPerS, l.sqsApiPerS),
    use("Fargate task launches/s (exclusive env workers)", result.rates.launchesPerS, l.fargateLaunchPerS),
  ];
}

export interface PlanReport {
  readonly result: PipelineResult;
  readonly bill: Bill;
  readonly limits: readonly LimitUse[];
  /** The role or limit that saturates first (see bottleneckOf). */
  readonly bottleneck: string;
}

/**
 * The first wall: an AWS limit past 85% of its value, else the busiest role past 85% busy, else
 * what holds the rate when no resource is saturated: the feeder's window (async) or the step
 * barrier (sync: generation waits for the slowest group every step).
 */
export function bottleneckOf(scenario: Scenario, result: PipelineResult, limits: readonly LimitUse[]): string {
  const SATURATED = 0.85;
  const limit = [...limits].sort((a, b) => b.share - a.share)[0];
  if (limit && limit.share >= SATURATED) return limit.limit;
  const busiest = [...result.utilisation].sort((a, b) => b.utilisation - a.utilisation)[0];
  if (busiest && busiest.utilisation >= SATURATED) return busiest.role;
  return scenario.mode === "async" ? "feeder window" : "sync step barrier";
}

/** Simulates a scenario and prices it. */
export function runScenario(scenario: Scenario, calibration: Calibration): PlanReport {
  const result = simulatePipeline(planOf(scenario, calibration));
  const bill = billOf(scenario, calibration, result);
  const limits = limitsOf(scenario, calibration, result);
  return { result, bill, limits, bottleneck: bottleneckOf(scenario, result, limits) };
}
