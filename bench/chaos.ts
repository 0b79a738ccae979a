/**
 * `npm run chaos -- --minutes N`: the chaos run of issue 19 (bench/chaosRun.ts). A local
 * pipeline on the tiny model; every role is SIGKILLed in turn at random times for N minutes (the
 * trainer also inside its publish window), then the run finishes its steps and the invariants are
 * checked. Prints a table (kills per role, recovery p50/max, steps, invariants) and, as its last
 * line, one JSON object with the same figures. Exit code 1 when an invariant broke.
 *
 *   npm run chaos -- --minutes 20 [--steps S] [--seed K] [--keep]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { abortOnStopSignals, readScriptArgs, usageError } from "../shared/commandLine.ts";
import { createLogger } from "../shared/log.ts";
import { formatReport, runChaos } from "./chaosRun.ts";

/**
 * Trainer steps per minute of chaos, so that the run outlasts the kills: the 20-minute run made
 * 1,500 steps in 24.7 min with 128 kills (2 cores, load 15-21, the chaos run's autogroup at
 * nice -20). On a slower or busier machine the kills still stop after --minutes and the rest of
 * the steps run undisturbed; pass --steps to size the run yourself.
 */
const STEPS_PER_MINUTE = 60;

const SCRIPT = { command: "npm run chaos --", usage: "[--minutes N] [--steps S] [--seed K] [--keep]" };
const { values } = readScriptArgs(SCRIPT, {
  options: {
    minutes: { type: "string", default: "3" },
    steps: { type: "string" },
    seed: { type: "string", default: "19" },
    keep: { type: "boolean", default: false },
  },
});
const minutes = Number(values.minutes);
if (!Number.isFinite(minutes) || minutes <= 0)
  usageError(SCRIPT, `--minutes must be a positive number, got ${values.minutes}`);
const steps = values.steps === undefined ? Math.max(4, Math.ceil(minutes * STEPS_PER_MINUTE)) : Number(values.steps);
if (!Number.isInteger(steps) || steps < 1)
  usageError(SCRIPT, `--steps must be a positive integer, got ${values.steps}`);
const seed = Number(values.seed);
if (!Number.isInteger(seed)) usageError(SCRIPT, `--seed must be an integer, got ${values.seed}`);

const dir = mkdtempSync(join(tmpdir(), "agentrl-chaos-"));
process.stderr.write(`chaos run: ${minutes} min of kills, ${steps} steps, folder ${dir}\n`);
// A stop ends the run as its end does (roles stopped, the folder removed unless --keep).
const stopped = abortOnStopSignals(SCRIPT, "the chaos run");
try {
  const report = await runChaos({
    signal: stopped,
    runDir: dir,
    steps,
    rounds: 10_000,
    chaosMs: minutes * 60_000,
    pauseMs: [2_000, 10_000],
    seed,
    log: createLogger({ role: "chaos" }),
  });
  process.stdout.write(`${formatReport(report)}\n`);
  process.exitCode = Object.values(report.invariants).every(Boolean) ? 0 : 1;
} catch (error) {
  if (!stopped.aborted) throw error;
  process.stderr.write(`chaos run stopped by ${String(stopped.reason)}; no invariant was checked\n`);
  process.exitCode = 1;
} finally {
  if (!values.keep) rmSync(dir, { recursive: true, force: true });
}
