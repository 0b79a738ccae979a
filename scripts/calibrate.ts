/**
 * `npm run calibrate`: rewrites the measured figures of the calibration file from short runs of
 * the benches on this machine, with the command and the load average beside each, then checks the
 * simulator against bench:pipeline's measured rates (test/fixtures/bench-pipeline-measured.json)
 * and exits 1 when a prediction is more than 15% off or above the Little's-law bound.
 *
 * Benches: bench:controller with 3 s phases (controller saturation, CPU per request),
 * bench:transport --local-only with 2 s phases (queue and store latencies; 11 s at load 6.7),
 * bench:policy with BENCH_SECONDS=0.5 (the default model's decode by concurrency through the
 * policy server's scheduler, and its training tokens/s: the `default-cpu` profiles). Published GPU figures, the AWS limits and prices, and the fitted
 * per-workload figures are kept as they are: they are not measured here.
 *
 * Flags: --out FILE (default: the committed calibration/calibration.json), --benches
 * controller,transport,policy (which to run), --check-only (run no bench; only the check).
 */
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { z } from "zod";
import { asyncRateBound } from "../bench/pipelineBound.ts";
import { benchScenario } from "../bench/pipelinePlan.ts";
import { ControllerSummary, PolicySummary, parseSummary, TransportSummary } from "../bench/summary.ts";
import { DEFAULT_CALIBRATION } from "../cli/commands/plan.ts";
import { readScriptArgs } from "../shared/commandLine.ts";
import { type Calibration, parseCalibration, type Source } from "../shared/plan/calibration.ts";
import { runScenario } from "../shared/plan/scenario.ts";

const SCRIPT = {
  command: "npm run calibrate --",
  usage: "[--out FILE] [--benches controller,transport,policy] [--check-only]",
};
const { values } = readScriptArgs(SCRIPT, {
  options: {
    out: { type: "string", default: DEFAULT_CALIBRATION },
    benches: { type: "string", default: "controller,transport,policy" },
    "check-only": { type: "boolean", default: false },
  },
});
const BENCHES = ["controller", "transport", "policy"] as const;
const wanted = values.benches.split(",").map((b) => b.trim());
for (const b of wanted)
  if (!(BENCHES as readonly string[]).includes(b)) {
    console.error(`--benches: unknown bench "${b}"; allowed: ${BENCHES.join(", ")}`);
    process.exit(2);
  }

const calibration: Calibration = parseCalibration(
  JSON.parse(readFileSync(DEFAULT_CALIBRATION, "utf8")),
  DEFAULT_CALIBRATION,
);
const today = new Date().toISOString().slice(0, 10);
const load = () => loadavg()[0]?.toFixed(1) ?? "?";

/** Runs `npx tsx bench/<name>.ts ...args`, returning its stdout and the load before and after. */
function bench(
  name: string,
  args: readonly string[],
  env: Record<string, string> = {},
): { stdout: string; command: string; note: string } {
  const prefix = Object.entries(env)
    .map(([k, v]) => `${k}=${v} `)
    .join("");
  const command = `${prefix}npx tsx bench/${name}.ts ${args.join(" ")}`.trim();
  const before = load();
  const started = performance.now();
  console.error(`calibrate: ${command} (load ${before}) ...`);
  const run = spawnSync("npx", ["tsx", `bench/${name}.ts`, ...args], {
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, ...env },
  });
  if (run.status !== 0) {
    console.error(`calibrate: ${command} exited with ${run.status}:\n${run.stderr.slice(-2000)}`);
    process.exit(1);
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(0);
  return { stdout: run.stdout, command, note: `load average ${before} -> ${load()}, ${seconds} s` };
}

const measured = (command: string, note: string): Source => ({ kind: "measured", ref: command, date: today, note });

if (!values["check-only"]) {
  if (wanted.includes("controller")) {
    const run = bench("controller", ["--phase-s", "3"]);
    const s = parseSummary(ControllerSummary, run.stdout);
    calibration.controller = {
      saturationReqPerS: s.saturationReqPerS,
      cpuMsPerRequest: s.controllerCpuMsPerReqAt1000 ?? calibration.controller.cpuMsPerRequest,
      source: measured(run.command, run.note),
    };
  }
  if (wanted.includes("transport")) {
    const run = bench("transport", ["--local-only", "--phase-ms", "2000"]);
    const s = parseSummary(TransportSummary, run.stdout);
    const cycleMs = s.localMsgPerS ? 1000 / s.localMsgPerS : calibration.queue.latencyMs;
    calibration.queue = {
      // a send+receive+delete cycle plus the consumers' polling, which the cycle does not see
      latencyMs: Math.max(calibration.queue.latencyMs, cycleMs),
      source: measured(run.command, `${run.note}; one cycle ${cycleMs.toFixed(2)} ms`),
    };
    calibration.store = {
      putMs: s.localPutP50Ms ?? calibration.store.putMs,
      getMs: s.localGetP50Ms ?? calibration.store.getMs,
      source: measured(run.command, run.note),
    };
  }
  if (wanted.includes("policy")) {
    // the project's default model through the policy server's scheduler, and its training rate
    const run = bench("policy", ["--widths", "1,64"], { BENCH_SECONDS: "0.5" });
    const s = parseSummary(PolicySummary, run.stdout);
    const decode = calibration.decode["default-cpu"];
    const trainer = calibration.trainer["default-cpu"];
    if (decode && s.workerTokPerS1 && s.workerTokPerS64)
      calibration.decode["default-cpu"] = {
        ...decode,
        tokPerSByConcurrency: [
          [1, s.workerTokPerS1],
          [64, s.workerTokPerS64],
        ],
        source: measured(run.command, `${run.note}; per process CPU second`),
      };
    if (trainer && s.trainTokPerS)
      calibration.trainer["default-cpu"] = {
        ...trainer,
        tokPerSPerDevice: s.trainTokPerS,
        source: measured(run.command, `${run.note}; per process CPU second`),
      };
  }
  writeFileSync(values.out, `${JSON.stringify(calibration, null, 2)}\n`);
  console.error(`calibrate: wrote ${values.out}`);
}

const Fixture = z.object({
  runs: z.record(z.string(), z.object({ async: z.array(z.number()), sync: z.array(z.number()) })),
});
const fixture = Fixture.parse(
  JSON.parse(readFileSync(new URL("../test/fixtures/bench-pipeline-measured.json", import.meta.url), "utf8")),
);
const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
let failed = false;
for (const workload of ["default", "longtail"] as const)
  for (const mode of ["async", "sync"] as const) {
    const scenario = benchScenario(workload, mode);
    const { result } = runScenario(scenario, calibration);
    const want = median(fixture.runs[workload]?.[mode] ?? []);
    const error = result.trajectoriesPerS / want - 1;
    let line = `${workload} ${mode}: simulated ${result.trajectoriesPerS.toFixed(2)}/s, measured ${want}/s (${(error * 100).toFixed(1)}%)`;
    if (Math.abs(error) > 0.15) failed = true;
    if (mode === "async") {
      const bound = asyncRateBound(
        {
          groupSize: scenario.groupSize,
          batchGroups: scenario.batchGroups,
          windowEpisodes: scenario.windowGroups * scenario.groupSize,
          slots: scenario.rolloutSlots,
        },
        {
          episodeSeconds: [result.meanEpisodeSeconds],
          groupSeconds: [result.meanGroupSeconds],
          steps: [{ seconds: result.meanHoldSeconds, trajectories: 1 }],
          windowSeconds: result.windowSeconds,
        },
      );
      line += `; Little's-law bound ${bound.rate.toFixed(2)}/s`;
      if (result.trajectoriesPerS > bound.rate) failed = true;
    }
    console.log(line);
  }
if (failed) {
  console.error(
    "calibrate: the simulator is more than 15% off bench:pipeline or above its bound with this calibration",
  );
  process.exit(1);
}
