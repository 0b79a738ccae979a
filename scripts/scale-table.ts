/**
 * docs/scale.md's table: `agentrl plan` over 10..10,000 env workers x 1..64 trainer GPUs with the
 * committed calibration, printed as Markdown rows (and one JSON line per cell on stderr).
 * Run: `npx tsx scripts/scale-table.ts [--workers 10,100,1000,10000] [--gpus 1,8,64] [--trainer-kept-up]`
 *
 * Per row, what scales with the env workers M (5 tasks, 16 sessions each, the default mix):
 * rollout workers M/4 (64 episodes each), policy servers ceil(M/20) (one H100 per 320 sessions),
 * trainer.batchSize = M groups of 8 (the window of 2 batches then covers every session), at most
 * 2,000 (a step of 16,000 trajectories; the window stays under SQS's 120,000 in-flight messages).
 */

import { readFileSync } from "node:fs";
import { DEFAULT_CALIBRATION, parsePlanFlags, scenarioOf } from "../cli/commands/plan.ts";
import { readScriptArgs } from "../shared/commandLine.ts";
import { parseConfig } from "../shared/config/index.ts";
import { parseCalibration } from "../shared/plan/calibration.ts";
import { runScenario } from "../shared/plan/scenario.ts";

const SCRIPT = {
  command: "npx tsx scripts/scale-table.ts",
  usage: "[--workers 10,100,1000,10000] [--gpus 1,8,64] [--controllers N]",
};
const { values } = readScriptArgs(SCRIPT, {
  options: {
    workers: { type: "string", default: "10,100,1000,10000" },
    gpus: { type: "string", default: "1,8,64" },
    controllers: { type: "string", default: "1" },
  },
});
const list = (text: string) => text.split(",").map((x) => Number(x.trim()));
const calibration = parseCalibration(JSON.parse(readFileSync(DEFAULT_CALIBRATION, "utf8")), DEFAULT_CALIBRATION);
const f = (x: number, d = 0) => x.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });

console.log(
  "| env workers | trainer GPUs | policy servers | traj/s | gen. tok/s | bottleneck | busiest others | $/h on demand | $ per 1M traj (on demand / spot) | staleness > bound |",
);
console.log("|---|---|---|---|---|---|---|---|---|---|");
for (const m of list(values.workers))
  for (const g of list(values.gpus)) {
    const batch = Math.min(2000, Math.max(8, m));
    const config = parseConfig({ trainer: { batchSize: batch }, rollout: { concurrency: 64 } });
    const policyServers = Math.max(1, Math.ceil(m / 20));
    const flags = parsePlanFlags({
      envWorkers: String(m),
      policyServers: String(policyServers),
      trainerGpus: String(g),
      rolloutWorkers: String(Math.max(1, Math.ceil(m / 4))),
      controllers: values.controllers,
    });
    const scenario = scenarioOf(config, flags);
    const started = performance.now();
    const report = runScenario(scenario, calibration);
    const wall = (performance.now() - started) / 1000;
    const r = report.result;
    const others = [...r.utilisation, ...report.limits.map((l) => ({ role: l.limit, utilisation: l.share }))]
      .filter((u) => u.role !== report.bottleneck)
      .sort((a, b) => b.utilisation - a.utilisation)
      .slice(0, 2)
      .map((u) => `${u.role} ${f(u.utilisation * 100)}%`)
      .join(", ");
    console.log(
      `| ${f(m)} | ${g} | ${policyServers} | ${f(r.trajectoriesPerS, 1)} | ${f(r.generatedTokensPerS)} | ${report.bottleneck} | ${others} | ${f(report.bill.onDemandPerHour)} | ${f(report.bill.onDemandPer1M)} / ${f(report.bill.spotPer1M)} | ${f(r.staleBeyondBound * 100, 1)}% |`,
    );
    console.error(
      JSON.stringify({
        m,
        g,
        policyServers,
        batch,
        trajPerS: r.trajectoriesPerS,
        bottleneck: report.bottleneck,
        wall,
        events: r.events,
      }),
    );
  }
