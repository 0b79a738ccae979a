/**
 * `npm run bench:envpool` — what env pools cost and hide, side by side in one run.
 *
 * One controller; for each scenario a fresh pool (process driver: real `agentrl env serve`
 * child processes) and a client that plays the task's expert agent through the controller:
 *  - exclusive sessions on `os` (one fresh worker per episode) with warm pool 0 and 4;
 *  - shared workers on `example` without a reuse limit and with maxEpisodes 3 (the cost of
 *    recycling).
 * Reports episodes/s and p50/p99 time from start_sample to the first observation (including
 * the wait for a free worker: 406 answers are retried). Every figure depends on the machine's
 * load; the load average is printed beside them.
 *
 * Options: --episodes 8 (exclusive rows), --shared-episodes 24, --inflight 2
 */

import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { TASK_MODULES } from "../env-images/registry.ts";
import { startController } from "../functions/controller/controller.ts";
import { PoolManager } from "../functions/envpool/manager.ts";
import { percentile } from "../functions/envpool/policy.ts";
import { ProcessDriver } from "../functions/envpool/processDriver.ts";
import { ControllerClient, EnvBadRequestError, EnvCapacityError } from "../shared/env/client.ts";
import { createLogger } from "../shared/log.ts";
import type { ChatMessage } from "../shared/protocol/openai.ts";

const args = new Map<string, number>();
for (let i = 2; i < process.argv.length; i += 2)
  args.set(String(process.argv[i]).replace(/^--/, ""), Number(process.argv[i + 1]));
const EXCLUSIVE_EPISODES = args.get("episodes") ?? 8;
const SHARED_EPISODES = args.get("shared-episodes") ?? 24;
const INFLIGHT = args.get("inflight") ?? 2;

interface Scenario {
  readonly label: string;
  readonly task: string;
  readonly episodes: number;
  readonly exclusive: boolean;
  readonly warm: number;
  readonly maxEpisodes?: number;
}

const SCENARIOS: Scenario[] = [
  { label: "os, exclusive, warm 0", task: "os", episodes: EXCLUSIVE_EPISODES, exclusive: true, warm: 0 },
  { label: "os, exclusive, warm 4", task: "os", episodes: EXCLUSIVE_EPISODES, exclusive: true, warm: 4 },
  { label: "example, shared, no reuse limit", task: "example", episodes: SHARED_EPISODES, exclusive: false, warm: 0 },
  {
    label: "example, shared, maxEpisodes 3",
    task: "example",
    episodes: SHARED_EPISODES,
    exclusive: false,
    warm: 0,
    maxEpisodes: 3,
  },
];

const log = createLogger({ role: "bench-envpool" });
const controller = await startController({ port: 0, heartbeatTimeoutMs: 6_000, forgetAfterMs: 30_000, log });
const client = new ControllerClient({ baseUrl: controller.url, maxRetries: 0 });
const rows: string[] = [];
const loadBefore = loadavg()[0]?.toFixed(1);
try {
  for (const scenario of SCENARIOS) rows.push(await run(scenario));
} finally {
  await controller.close();
}
process.stdout.write(
  [
    `| scenario | episodes | episodes/s | start_sample -> first observation p50 / p99 (ms) | workers launched | time to ready p50 (ms) |`,
    "|---|---|---|---|---|---|",
    ...rows,
    "",
    `load average (1 min): ${loadBefore} before, ${loadavg()[0]?.toFixed(1)} after; ${INFLIGHT} episodes in flight`,
    "",
  ].join("\n"),
);

async function run(scenario: Scenario): Promise<string> {
  const module = await TASK_MODULES[scenario.task]?.();
  if (!module) throw new Error(`unknown task ${scenario.task}`);
  const stateDir = mkdtempSync(join(tmpdir(), "bench-envpool-"));
  const driver = new ProcessDriver({
    task: scenario.task,
    controllerUrl: controller.url,
    stateDir,
    heartbeatMs: 1_000,
    log,
  });
  const manager = new PoolManager({
    task: scenario.task,
    controllerUrl: controller.url,
    driver,
    minWorkers: scenario.exclusive ? 0 : 1,
    maxWorkers: scenario.exclusive ? INFLIGHT + scenario.warm : 2,
    concurrency: 4,
    exclusive: scenario.exclusive,
    warmWorkers: scenario.warm,
    ...(scenario.maxEpisodes !== undefined ? { maxEpisodes: scenario.maxEpisodes } : {}),
    tickMs: 200,
    scaleDownAfterMs: 5_000,
    log,
  });
  manager.start();
  try {
    // Start measuring once the pool reached its resting size (the warm pool is full).
    const resting = scenario.exclusive ? scenario.warm : 1;
    while (manager.status().workers.ready < resting) await new Promise((r) => setTimeout(r, 100));
    const range = module.task.splits.train;
    const latencies: number[] = [];
    let next = 0;
    const started = Date.now();
    const lane = async () => {
      for (let k = next++; k < scenario.episodes; k = next++) {
        const index = range.start + (k % (range.end - range.start));
        latencies.push(await episode(scenario.task, index, module.expert.act.bind(module.expert)));
      }
    };
    await Promise.all(Array.from({ length: INFLIGHT }, lane));
    const seconds = (Date.now() - started) / 1000;
    const status = manager.status();
    const p50 = percentile(latencies, 50) ?? 0;
    const p99 = percentile(latencies, 99) ?? 0;
    return `| ${scenario.label} | ${scenario.episodes} | ${(scenario.episodes / seconds).toFixed(2)} | ${p50} / ${p99} | ${status.counters.launches} | ${status.timeToReadyMs.p50 ?? "-"} |`;
  } finally {
    await manager.close();
    rmSync(stateDir, { recursive: true, force: true });
  }
}

/** Plays one episode with the expert; returns the start_sample -> first observation time in ms. */
async function episode(
  task: string,
  index: number,
  act: (messages: readonly ChatMessage[], index: number) => unknown,
): Promise<number> {
  const asked = Date.now();
  let sample: Awaited<ReturnType<ControllerClient["startSample"]>>;
  for (;;) {
    try {
      sample = await client.startSample(task, index);
      break;
    } catch (error) {
      // 406: every worker busy or still starting; 404: none registered yet (exclusive, warm 0).
      if (!(error instanceof EnvCapacityError || error instanceof EnvBadRequestError)) throw error;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  const latency = Date.now() - asked;
  const messages: ChatMessage[] = [...sample.messages];
  for (let turn = 0; turn < 30; turn++) {
    const message = (await act(messages, index)) as Parameters<ControllerClient["interact"]>[1];
    const answer = await client.interact(sample.sessionId, message);
    messages.push(message, ...answer.messages);
    if (answer.finish) return latency;
  }
  await client.cancel(sample.sessionId);
  return latency;
}
