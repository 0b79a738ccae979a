/**
 * `npm run bench:os-threads` — what the os env worker's shell-thread pool saves.
 *
 * Plays the os expert's episodes `--concurrency` at a time for `--rounds` rounds (as an env worker
 * serving a rollout's groups does), once with the pool capped at 4 idle threads and once sized to
 * the load (the default: as many as were used at once), side by side in one process. Prints the
 * CPU time of each (shell threads included), the threads each started, and the resident memory
 * with the sized pool's threads idle. CPU time depends less on the machine's load than wall time;
 * the load average is printed beside the figures.
 *
 * Options: --concurrency 32 (1..64), --rounds 6 (1..100)
 */
import { Worker } from "node:worker_threads";
import { z } from "zod";
import { osExpert } from "../env-images/os/agents.ts";
import { OS_SPLITS } from "../env-images/os/generator.ts";
import { ShellPool } from "../env-images/os/sandbox.ts";
import { createOsTask } from "../env-images/os/task.ts";
import { readScriptArgs, validateScriptArgs } from "../shared/commandLine.ts";
import { runScripted } from "../shared/env/session.ts";
import { figure, load1, OsThreadsSummary, printSummary } from "./summary.ts";

const Options = z.object({
  concurrency: z.coerce.number().int().min(1).max(64),
  rounds: z.coerce.number().int().min(1).max(100),
});
const SCRIPT = { command: "npm run bench:os-threads --", usage: "[--concurrency 1..64] [--rounds 1..100]" };
const { concurrency, rounds } = validateScriptArgs(
  SCRIPT,
  Options,
  readScriptArgs(SCRIPT, {
    options: { concurrency: { type: "string", default: "32" }, rounds: { type: "string", default: "6" } },
  }).values,
);
const SHELL_WORKER = new URL("../env-images/os/shellWorker.mjs", import.meta.url);

async function play(maxIdle: number | undefined, shape: { concurrency: number; rounds: number }) {
  let started = 0;
  const pool = new ShellPool({
    ...(maxIdle === undefined ? {} : { maxIdle }),
    spawn: () => {
      started += 1;
      return new Worker(SHELL_WORKER, { resourceLimits: { maxOldGenerationSizeMb: 256 } });
    },
  });
  const task = createOsTask({ pool });
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let index = OS_SPLITS.test.start;
  let solved = 0;
  for (let round = 0; round < shape.rounds; round++) {
    const runs = await Promise.all(
      Array.from({ length: shape.concurrency }, () => runScripted(task, index++, osExpert)),
    );
    solved += runs.filter((run) => run.status === "completed" && run.reward >= 1).length;
  }
  const cpu = process.cpuUsage(cpu0);
  const result = { cpuS: (cpu.user + cpu.system) / 1e6, wallS: (performance.now() - t0) / 1000, started, solved };
  const rssMiB = process.memoryUsage().rss / 2 ** 20;
  pool.drain();
  return { ...result, rssMiB };
}

const episodes = concurrency * rounds;
// Both sides after the same start-up: modules loaded and compiled in the main thread.
await play(undefined, { concurrency: 2, rounds: 1 });
const capped = await play(4, { concurrency, rounds });
const sized = await play(undefined, { concurrency, rounds });
for (const [label, r] of [
  ["capped at 4 idle threads", capped],
  ["sized to the load       ", sized],
] as const)
  console.log(
    `os, ${concurrency} at a time × ${rounds} rounds, pool ${label}: ${r.cpuS.toFixed(1)} s CPU, ` +
      `${r.wallS.toFixed(1)} s wall, ${r.started} threads started, expert solved ${r.solved}/${episodes}; load ${load1()}`,
  );
console.log(`resident memory with the sized pool's ${sized.started} threads idle: ${sized.rssMiB.toFixed(0)} MiB`);
printSummary(OsThreadsSummary, {
  concurrency,
  rounds,
  cappedCpuS: figure(capped.cpuS),
  sizedCpuS: figure(sized.cpuS),
  cappedThreadsStarted: capped.started,
  sizedThreadsStarted: sized.started,
  sizedIdleRssMiB: figure(sized.rssMiB),
  load1: load1(),
});
process.exit(0);
