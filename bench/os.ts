/**
 * `npm run bench:os` — AgentBench OS episodes per minute in containers, at 1, 2 and 4 at a time.
 *
 * Upstream's example plays each episode (the expert of `agentrl env check`) over the first
 * `--episodes` instances of the split that this host can run, `--concurrency` at a time. Per
 * episode it times the start (container, init scripts, start script: `task.start`) and the first
 * observation (the first bash_action), which tells whether a warm pool of started containers
 * would pay. Every figure depends on the machine and its load; the load average is printed beside
 * them. Needs podman or Docker and AgentBench's images (`npm run images -- --agentbench-os`).
 *
 * Options: --task os-std|os-dev|os-env_train (os-std), --episodes 12, --concurrency 1,2,4
 */
import { z } from "zod";
import { TASK_MODULES } from "../env-images/registry.ts";
import { percentile } from "../functions/envpool/policy.ts";
import { readScriptArgs, validateScriptArgs } from "../shared/commandLine.ts";
import { runnableIndices, runScripted } from "../shared/env/session.ts";
import type { Episode, TaskDefinition } from "../shared/env/task.ts";
import { figure, load1, OsSummary, printSummary } from "./summary.ts";

const Options = z.object({
  task: z.enum(["os-std", "os-dev", "os-env_train"]),
  episodes: z.coerce.number().int().min(1).max(1000),
  concurrency: z
    .string()
    .transform((list) => list.split(",").map(Number))
    .pipe(z.array(z.number().int().min(1).max(32)).min(1)),
});

const SCRIPT = {
  command: "npm run bench:os --",
  usage: "[--task os-std|os-dev|os-env_train] [--episodes 1..1000] [--concurrency a list such as 1,2,4]",
};
const options = validateScriptArgs(
  SCRIPT,
  Options,
  readScriptArgs(SCRIPT, {
    options: {
      task: { type: "string", default: "os-std" },
      episodes: { type: "string", default: "12" },
      concurrency: { type: "string", default: "1,2,4" },
    },
  }).values,
);

const module = await TASK_MODULES[options.task]!();
const all = Array.from({ length: module.task.splits.test.end }, (_, i) => i);
const { indices: runnable, skipped } = runnableIndices(module.task, all);
const indices = runnable.slice(0, options.episodes);
for (const [why, which] of skipped) console.log(`skipped ${which.length} instances (${which.join(", ")}): ${why}`);

interface Timing {
  startMs: number[];
  firstObservationMs: number[];
}

/** The task, with each episode's start and first tool call timed. */
function timed(task: TaskDefinition, timing: Timing): TaskDefinition {
  return {
    ...task,
    async start(index, signal): Promise<Episode> {
      const t0 = performance.now();
      const episode = await task.start(index, signal);
      timing.startMs.push(performance.now() - t0);
      let first = true;
      return {
        messages: episode.messages,
        call: async (tool, args, callSignal) => {
          const t1 = performance.now();
          const result = await episode.call(tool, args, callSignal);
          if (first) timing.firstObservationMs.push(performance.now() - t1);
          first = false;
          return result;
        },
        ...(episode.close ? { close: () => episode.close!() } : {}),
      };
    },
  };
}

const ms = (x: number | undefined) => (x === undefined ? "–" : `${x.toFixed(0)} ms`);

const rows: Array<{ concurrency: number; perMinute: number; solved: number; timing: Timing }> = [];
for (const concurrency of options.concurrency) {
  const timing: Timing = { startMs: [], firstObservationMs: [] };
  const task = timed(module.task, timing);
  const queue = [...indices];
  let solved = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let index = queue.shift(); index !== undefined; index = queue.shift()) {
        const run = await runScripted(task, index, module.expert);
        if (run.status === "completed" && run.reward >= 1) solved += 1;
      }
    }),
  );
  const minutes = (performance.now() - t0) / 60_000;
  rows.push({ concurrency, perMinute: indices.length / minutes, solved, timing });
  console.log(
    `${options.task}, ${concurrency} at a time: ${(indices.length / minutes).toFixed(1)} episodes/min ` +
      `(${indices.length} in ${(minutes * 60).toFixed(1)} s, expert solved ${solved}); ` +
      `start p50 ${ms(percentile(timing.startMs, 50))}, p90 ${ms(percentile(timing.startMs, 90))}; ` +
      `first observation p50 ${ms(percentile(timing.firstObservationMs, 50))}; load ${load1()}`,
  );
}
await module.task.close?.();

const at = (n: number) => figure(rows.find((row) => row.concurrency === n)?.perMinute);
printSummary(OsSummary, {
  task: options.task,
  episodes: indices.length,
  episodesPerMin1: at(1),
  episodesPerMin2: at(2),
  episodesPerMin4: at(4),
  startP50Ms: figure(
    percentile(
      rows.flatMap((row) => row.timing.startMs),
      50,
    ),
  ),
  firstObservationP50Ms: figure(
    percentile(
      rows.flatMap((row) => row.timing.firstObservationMs),
      50,
    ),
  ),
  expertSolved: rows.reduce((sum, row) => sum + row.solved, 0),
  load1: load1(),
});
