import { seededRandom } from "../rl/random.ts";
import type { DecodeProfile, TaskCost, TrainerProfile } from "./calibration.ts";
import { Draws, Fifo, Simulation, SlotPool, Station } from "./engine.ts";

/**
 * The pipeline as a discrete-event model, role by role as the code runs it:
 * - feeder (functions/feeder/feeder.ts): async, every pollMs it tops the window up to `windowGroups`
 *   groups outstanding (request sent to trajectory acknowledged); sync, it sends B groups once the
 *   trainer has published a newer version than the last batch saw.
 * - rollout workers: `rolloutSlots` episodes at once, requests taken in order.
 * - an episode: an env session of its task (a slot of envWorkers x sessions; exclusive tasks first
 *   launch a worker, at most the ECS/Fargate launch rate), start_sample through a controller,
 *   then turns of policy call + env step, each env call relayed by the controller (sessions
 *   routed to controllers by id); the trajectory is put to the store and announced on the queue.
 * - policy servers: calls spread round robin; continuous batching: a call's decode runs at the server's aggregate rate at
 *   its concurrency divided by that concurrency (snapshot when the call starts); each server takes
 *   a new version at its next poll.
 * - trainer (trainer-image/trainer/trainer.ts): when idle and at least B complete groups are
 *   buffered (the first step: ceil(warmupFactor * B)), it takes every complete group, trains,
 *   publishes every checkpointEvery-th version, and only then acknowledges them (freeing the window).
 * The staleness of a trajectory is the trainer's version when it trains it minus the version of
 * the policy that produced its first token (the oldest, so the largest lag).
 */

export interface TaskPlan {
  readonly name: string;
  readonly weight: number;
  readonly envWorkers: number;
  readonly sessionsPerWorker: number;
  /** Every episode gets a fresh worker (launched through ECS RunTask / Fargate). */
  readonly exclusive: boolean;
  readonly cost: TaskCost;
}

export interface PipelinePlan {
  readonly mode: "async" | "sync";
  readonly groupSize: number;
  /** Groups per step (trainer.batchSize). */
  readonly batchGroups: number;
  /** Groups outstanding in async mode (the feeder's inFlightGroupCap). */
  readonly windowGroups: number;
  /** Groups the first step waits for (groupsNeeded with warmupFactor). */
  readonly firstStepGroups: number;
  readonly maxStaleness: number;
  readonly checkpointEvery: number;
  readonly rolloutSlots: number;
  readonly controllers: number;
  readonly controllerReqPerS: number;
  readonly tasks: readonly TaskPlan[];
  readonly policyServers: number;
  readonly decode: DecodeProfile;
  readonly trainerDevices: number;
  readonly trainer: TrainerProfile;
  readonly rolloutOverheadMs: number;
  readonly feederPollMs: number;
  readonly queueLatencyMs: number;
  readonly storePutMs: number;
  readonly policyPollSeconds: number;
  /** Sustained launches/s and burst of the env pool's launcher (exclusive tasks). */
  readonly launchPerS: number;
  readonly seed: number;
  /** Trainer steps to simulate; figures come from the steps after `warmupSteps`. */
  readonly steps: number;
  readonly warmupSteps: number;
  /**
   * Env delays of a group's actions (ms; action 0 = start) when the workload fixes them, as the
   * latency task's instances do; undefined draws from the task's cost. @default - drawn
   */
  readonly delayMs?: (task: number, group: number, action: number) => number | undefined;
  /** Guard against runaway runs. @default 50,000,000 */
  readonly maxEvents?: number;
}

export interface RoleUse {
  readonly role: string;
  /**
   * Busy share of its capacity over the measured window, 0..1: slots held (rollout, env sessions),
   * busy time (controllers, trainer, launcher), tokens decoded over the servers' peak rate (policy).
   */
  readonly utilisation: number;
}

export interface PipelineResult {
  /** Trajectories trained per second over the measured window. */
  readonly trajectoriesPerS: number;
  /** Generated (policy) tokens/s and trained tokens/s. */
  readonly generatedTokensPerS: number;
  readonly trainedTokensPerS: number;
  readonly utilisation: readonly RoleUse[];
  /** Time-average episodes outstanding over the window (async: what the feeder's window holds). */
  readonly meanOutstanding: number;
  readonly windowEpisodes: number;
  /** Trajectories per staleness (index = versions behind). */
  readonly staleness: readonly number[];
  readonly staleBeyondBound: number;
  /** Mean seconds: episode (start to trajectory stored), its group (slowest member), step + publish. */
  readonly meanEpisodeSeconds: number;
  readonly meanGroupSeconds: number;
  readonly meanHoldSeconds: number;
  /** Rates the AWS limits are checked against (per second). */
  readonly rates: {
    readonly trajectoryPutsPerS: number;
    readonly trajectoryGetsPerS: number;
    readonly sqsCallsPerS: number;
    readonly launchesPerS: number;
    readonly controllerReqPerS: number;
  };
  readonly windowSeconds: number;
  readonly simulatedSeconds: number;
  readonly events: number;
  /** True when maxEvents stopped the run before `steps` steps. */
  readonly truncated: boolean;
}

/** Aggregate tokens/s of one server at concurrency c: piecewise linear through the profile's points. */
export function decodeRate(profile: DecodeProfile, c: number): number {
  const points = profile.tokPerSByConcurrency;
  const first = points[0] as [number, number];
  if (c <= first[0]) return (first[1] * c) / first[0];
  for (let i = 1; i < points.length; i++) {
    const [c1, r1] = points[i] as [number, number];
    const [c0, r0] = points[i - 1] as [number, number];
    if (c <= c1) return r0 + ((r1 - r0) * (c - c0)) / (c1 - c0);
  }
  return (points[points.length - 1] as [number, number])[1];
}

interface Group {
  readonly id: number;
  readonly task: number;
  readonly sentAt: number;
  done: number;
  finishedAt: number;
  tokens: number;
  readonly versions: number[];
  /** Per env action index: the shared delay (ms) when the task's members share delays. */
  readonly shared: number[];
}

/** Held-slot (or busy-server) time integrated since time 0, per pool. */
interface PoolAreas {
  readonly rollout: number;
  readonly env: number[];
  readonly controllers: number[];
  readonly launcher: number;
}

function validate(plan: PipelinePlan): void {
  const ints: Array<[string, number, number]> = [
    ["groupSize", plan.groupSize, 2],
    ["batchGroups", plan.batchGroups, 1],
    ["windowGroups", plan.windowGroups, 1],
    ["rolloutSlots", plan.rolloutSlots, 1],
    ["controllers", plan.controllers, 1],
    ["policyServers", plan.policyServers, 1],
    ["trainerDevices", plan.trainerDevices, 1],
    ["steps", plan.steps, plan.warmupSteps + 1],
  ];
  for (const [name, value, min] of ints)
    if (!(Number.isInteger(value) && value >= min))
      throw new RangeError(`${name} must be an integer >= ${min}, got ${value}`);
  if (plan.tasks.length === 0) throw new RangeError("tasks must name at least one task");
  for (const t of plan.tasks)
    if (!(Number.isInteger(t.envWorkers) && t.envWorkers >= 1))
      throw new RangeError(`tasks.${t.name}.envWorkers must be an integer >= 1, got ${t.envWorkers}`);
}

/**
 * Runs the model until `plan.steps` trainer steps are done (or maxEvents).
 * @example
 * const result = simulatePipeline(plan); result.trajectoriesPerS
 */
export function simulatePipeline(plan: PipelinePlan): PipelineResult {
  validate(plan);
  const sim = new Simulation();
  const draws = new Draws(seededRandom(plan.seed));
  const n = plan.groupSize;
  const ms = (x: number) => x / 1000;

  const rollout = new SlotPool(sim, plan.rolloutSlots);
  const controllers = Array.from({ length: plan.controllers }, () => new Station(sim, 1));
  const controllerService = 1 / plan.controllerReqPerS;
  const envPools = plan.tasks.map((t) => new SlotPool(sim, t.envWorkers * (t.exclusive ? 1 : t.sessionsPerWorker)));
  const launcher = new Station(sim, 1);
  const launchService = 1 / plan.launchPerS;
  // policy servers: active calls, the version each serves, tokens delivered
  const active = new Array<number>(plan.policyServers).fill(0);
  const served = new Array<number>(plan.policyServers).fill(0);
  let tokensGenerated = 0;
  let decodeBusyArea = 0;
  let lastDecodeChange = 0;
  let decodeRateNow = 0;
  const peak = decodeRate(plan.decode, Number.MAX_SAFE_INTEGER);
  const accountDecode = () => {
    decodeBusyArea += decodeRateNow * (sim.now - lastDecodeChange);
    lastDecodeChange = sim.now;
  };
  // the servers' summed rate, kept up to date as one server's concurrency changes
  const setActive = (server: number, delta: number) => {
    const before = active[server] as number;
    active[server] = before + delta;
    decodeRateNow += decodeRate(plan.decode, before + delta) - decodeRate(plan.decode, before);
  };

  // trainer
  let version = 0;
  let published = 0;
  let trainerBusy = false;
  let trainerBusyArea = 0;
  let steps = 0;
  let stepsDone = 0;
  const complete: Group[] = [];
  const stepEnds: Array<{ time: number; trajectories: number; tokens: number }> = [];
  const staleness: number[] = [];
  let holdTotal = 0;
  let holdTrajectories = 0;
  let groupSecondsTotal = 0;
  let groupsCompleted = 0;
  let episodeSecondsTotal = 0;
  let episodesCompleted = 0;

  // feeder and the window
  let outstanding = 0;
  let outstandingArea = 0;
  let lastOutstandingChange = 0;
  const setOutstanding = (delta: number) => {
    outstandingArea += outstanding * (sim.now - lastOutstandingChange);
    lastOutstandingChange = sim.now;
    outstanding += delta;
  };
  let nextGroup = 0;
  let lastFedVersion = -1;
  const weights = plan.tasks.map((t) => t.weight);
  const weightSum = weights.reduce((a, b) => a + b, 0);
  const credit = new Array<number>(plan.tasks.length).fill(0);
  // smooth weighted round robin: the mix interleaved in proportion, deterministically
  const pickTask = () => {
    let best = 0;
    for (let i = 0; i < credit.length; i++) {
      credit[i] = (credit[i] as number) + (weights[i] as number);
      if ((credit[i] as number) > (credit[best] as number)) best = i;
    }
    credit[best] = (credit[best] as number) - weightSum;
    return best;
  };
  let controllerRequests = 0;
  let launches = 0;
  let puts = 0;

  const viaController = (episode: number, then: () => void) => {
    controllerRequests += 1;
    (controllers[episode % controllers.length] as Station).submit(controllerService, then);
  };

  let nextServer = 0;
  const policyCall = (tokens: number, then: (servedVersion: number) => void) => {
    // calls spread round robin, as a load balancer in front of the pool would
    const server = nextServer;
    nextServer = (nextServer + 1) % active.length;
    accountDecode();
    setActive(server, 1);
    const c = active[server] as number;
    const seconds = ms(plan.decode.overheadMsPerCall) + tokens / (decodeRate(plan.decode, c) / c);
    const v = served[server] as number;
    sim.after(seconds, () => {
      accountDecode();
      setActive(server, -1);
      tokensGenerated += tokens;
      then(v);
    });
  };

  let episodeSeq = 0;
  const runEpisode = (group: Group) => {
    const task = plan.tasks[group.task] as TaskPlan;
    const cost = task.cost;
    const episode = episodeSeq++;
    const started = sim.now;
    const pool = envPools[group.task] as SlotPool;
    const turns = Math.floor(cost.turns) + (draws.uniform() < cost.turns - Math.floor(cost.turns) ? 1 : 0);
    // env actions: the mean's floor, plus one with the fractional part's probability, at most one per turn
    const extraStep = draws.uniform() < cost.envSteps - Math.floor(cost.envSteps) ? 1 : 0;
    const envSteps = Math.min(turns, Math.floor(cost.envSteps) + extraStep);
    const delay = (action: number, shape: TaskCost["startMs"]) => {
      const fixed = plan.delayMs?.(group.task, group.id, action);
      if (fixed !== undefined) return ms(fixed);
      if (!cost.groupSharesDelays) return ms(draws.lognormal(shape.medianMs, shape.sigma, shape.maxMs));
      while (group.shared.length <= action) group.shared.push(Number.NaN);
      if (Number.isNaN(group.shared[action] as number))
        group.shared[action] = draws.lognormal(shape.medianMs, shape.sigma, shape.maxMs);
      return ms(group.shared[action] as number);
    };
    let firstVersion = -1;
    let tokens = cost.promptTokens;
    const finish = () => {
      pool.release();
      sim.after(ms(plan.rolloutOverheadMs + plan.storePutMs), () => {
        puts += 1;
        rollout.release();
        episodeSecondsTotal += sim.now - started;
        episodesCompleted += 1;
        group.tokens += tokens;
        group.versions.push(firstVersion);
        group.done += 1;
        sim.after(ms(plan.queueLatencyMs), () => {
          if (group.done === n) {
            group.finishedAt = sim.now;
            complete.push(group);
            tryTrain();
          }
        });
        pump();
      });
    };
    const turn = (k: number) => {
      if (k >= turns) return finish();
      policyCall(cost.tokensPerTurn, (v) => {
        if (firstVersion < 0) firstVersion = v;
        tokens += cost.tokensPerTurn + cost.observationTokens;
        if (k >= envSteps) return turn(k + 1);
        viaController(episode, () => sim.after(delay(k + 1, cost.stepMs), () => turn(k + 1)));
      });
    };
    const start = () =>
      pool.acquire(() => viaController(episode, () => sim.after(delay(0, cost.startMs), () => turn(0))));
    if (task.exclusive) {
      launches += 1;
      launcher.submit(launchService, start);
    } else start();
  };

  // requests waiting for a rollout slot, in order
  const pending = new Fifo<Group>();
  const pump = () => {
    while (pending.length > 0 && rollout.inUse < rollout.capacity) {
      const group = pending.shift() as Group;
      rollout.acquire(() => runEpisode(group));
    }
  };
  const sendGroups = (count: number) => {
    for (let g = 0; g < count; g++) {
      const group: Group = {
        id: nextGroup++,
        task: pickTask(),
        sentAt: sim.now,
        done: 0,
        finishedAt: 0,
        tokens: 0,
        versions: [],
        shared: [],
      };
      setOutstanding(n);
      sim.after(ms(plan.queueLatencyMs), () => {
        for (let i = 0; i < n; i++) pending.push(group);
        pump();
      });
    }
  };
  const feederTick = () => {
    if (plan.mode === "async") {
      const count = Math.floor((plan.windowGroups * n - outstanding) / n);
      if (count > 0) sendGroups(count);
    } else if (lastFedVersion < 0 || published > lastFedVersion) {
      lastFedVersion = published;
      sendGroups(plan.batchGroups);
    }
    if (stepsDone < plan.steps) sim.after(ms(plan.feederPollMs), feederTick);
  };

  const deviceRate = plan.trainer.tokPerSPerDevice * plan.trainerDevices ** plan.trainer.scalingExponent;
  let measureFrom = Number.NaN;
  let measureFromStats = { decode: 0, trainer: 0, outstanding: 0, tokens: 0, controllerReq: 0, puts: 0, launches: 0 };
  const snapshot = () => {
    accountDecode();
    setOutstanding(0);
    return {
      decode: decodeBusyArea,
      trainer: trainerBusyArea,
      outstanding: outstandingArea,
      tokens: tokensGenerated,
      controllerReq: controllerRequests,
      puts,
      launches,
    };
  };
  let windowStartAreas: PoolAreas | undefined;

  const tryTrain = () => {
    if (trainerBusy) return;
    const needed = stepsDone === 0 ? plan.firstStepGroups : plan.batchGroups;
    if (complete.length < needed) return;
    const taken = complete.splice(0);
    const trajectories = taken.length * n;
    const tokens = taken.reduce((sum, g) => sum + g.tokens, 0);
    const trainS = plan.trainer.stepOverheadS + tokens / deviceRate;
    version += 1;
    steps += 1;
    const publishes = version % plan.checkpointEvery === 0 || steps >= plan.steps;
    const cycle = trainS + (publishes ? plan.trainer.publishS : 0);
    trainerBusy = true;
    const trainedAt = version - 1;
    sim.after(cycle, () => {
      trainerBusy = false;
      trainerBusyArea += cycle;
      stepsDone += 1;
      if (publishes) {
        published = version;
        const v = version;
        // each server sees it at its next poll; poll phases spread evenly over the interval
        for (let s = 0; s < served.length; s++) {
          const phase = ((s + 0.5) / served.length) * plan.policyPollSeconds;
          const wait = (phase - (sim.now % plan.policyPollSeconds) + plan.policyPollSeconds) % plan.policyPollSeconds;
          sim.after(wait, () => {
            if ((served[s] as number) < v) served[s] = v;
          });
        }
      }
      setOutstanding(-trajectories);
      if (stepsDone > plan.warmupSteps) {
        stepEnds.push({ time: sim.now, trajectories, tokens });
        for (const g of taken) {
          groupSecondsTotal += g.finishedAt - g.sentAt;
          groupsCompleted += 1;
          for (const v of g.versions) {
            const lag = Math.max(0, trainedAt - v);
            while (staleness.length <= lag) staleness.push(0);
            staleness[lag] = (staleness[lag] as number) + 1;
          }
        }
        holdTotal += cycle * trajectories;
        holdTrajectories += trajectories;
      }
      if (stepsDone === plan.warmupSteps) {
        measureFrom = sim.now;
        measureFromStats = snapshot();
        windowStartAreas = poolAreas();
      }
      if (stepsDone >= plan.steps) sim.stop();
      else tryTrain();
    });
  };

  sim.after(0, feederTick);
  const maxEvents = plan.maxEvents ?? 50_000_000;
  function poolAreas(): PoolAreas {
    return {
      rollout: rollout.utilisation() * sim.now,
      env: envPools.map((p) => p.utilisation() * sim.now),
      controllers: controllers.map((c) => c.utilisation() * sim.now),
      launcher: launcher.utilisation() * sim.now,
    };
  }
  sim.run(Number.POSITIVE_INFINITY, maxEvents);
  const end = sim.now;
  const endStats = snapshot();
  const window = Number.isNaN(measureFrom) ? Number.NaN : (stepEnds.at(-1)?.time ?? end) - measureFrom;
  const trained = stepEnds.reduce((sum, s) => sum + s.trajectories, 0);
  const trainedTokens = stepEnds.reduce((sum, s) => sum + s.tokens, 0);
  const endAreas = poolAreas();
  const startAreas = windowStartAreas ?? endAreas;
  const share = (a: number, b: number, cap: number) => (window > 0 ? (a - b) / (cap * window) : 0);
  const utilisation: RoleUse[] = [
    { role: "rollout workers", utilisation: share(endAreas.rollout, startAreas.rollout, 1) },
    ...plan.tasks.map((t, i) => ({
      role: `env workers (${t.name})`,
      utilisation: share(endAreas.env[i] as number, startAreas.env[i] as number, 1),
    })),
    {
      role: plan.controllers > 1 ? "controllers (busiest)" : "controller",
      utilisation: Math.max(...endAreas.controllers.map((a, i) => share(a, startAreas.controllers[i] as number, 1))),
    },
    {
      role: "policy servers",
      utilisation: share(endStats.decode, measureFromStats.decode, peak * plan.policyServers),
    },
    { role: "trainer", utilisation: share(endStats.trainer, measureFromStats.trainer, 1) },
  ];
  if (plan.tasks.some((t) => t.exclusive))
    utilisation.push({ role: "env launches (ECS)", utilisation: share(endAreas.launcher, startAreas.launcher, 1) });
  const perS = (a: number, b: number) => (window > 0 ? (a - b) / window : 0);
  const staleTotal = staleness.reduce((a, b) => a + b, 0);
  const beyond = staleness.slice(plan.maxStaleness + 1).reduce((a, b) => a + b, 0);
  const rate = window > 0 ? trained / window : 0;
  return {
    trajectoriesPerS: rate,
    generatedTokensPerS: perS(endStats.tokens, measureFromStats.tokens),
    trainedTokensPerS: window > 0 ? trainedTokens / window : 0,
    utilisation: utilisation.map((u) => ({ role: u.role, utilisation: Math.min(1, Math.max(0, u.utilisation)) })),
    meanOutstanding: perS(endStats.outstanding, measureFromStats.outstanding),
    windowEpisodes: plan.mode === "async" ? plan.windowGroups * n : plan.batchGroups * n,
    staleness,
    staleBeyondBound: staleTotal > 0 ? beyond / staleTotal : 0,
    meanEpisodeSeconds: episodesCompleted > 0 ? episodeSecondsTotal / episodesCompleted : Number.NaN,
    meanGroupSeconds: groupsCompleted > 0 ? groupSecondsTotal / groupsCompleted : Number.NaN,
    meanHoldSeconds: holdTrajectories > 0 ? holdTotal / holdTrajectories : Number.NaN,
    rates: {
      trajectoryPutsPerS: perS(endStats.puts, measureFromStats.puts),
      trajectoryGetsPerS: rate,
      // send + receive + delete of one request and one TrajectoryReady per trajectory, unbatched: an upper count
      sqsCallsPerS: rate * 2 * 3,
      launchesPerS: perS(endStats.launches, measureFromStats.launches),
      controllerReqPerS: perS(endStats.controllerReq, measureFromStats.controllerReq),
    },
    windowSeconds: window,
    simulatedSeconds: end,
    events: sim.events,
    truncated: stepsDone < plan.steps,
  };
}
