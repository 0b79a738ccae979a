import type { Calibration } from "../../shared/plan/calibration.ts";
import type { PlanReport, Scenario } from "../../shared/plan/scenario.ts";

/** `agentrl plan`'s printed report: figures first, then where each external figure came from. */
export function formatPlan(
  scenario: Scenario,
  report: PlanReport,
  calibration: Calibration,
  wallSeconds: number,
): string[] {
  const r = report.result;
  const f = (x: number, d = 2) =>
    Number.isFinite(x) ? x.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d }) : "n/a";
  const pct = (x: number) => `${(x * 100).toFixed(0)}%`;
  const envWorkers = scenario.tasks.reduce((sum, t) => sum + t.envWorkers, 0);
  const staleTotal = r.staleness.reduce((a, b) => a + b, 0);
  const lines = [
    `scenario: ${scenario.mode}, ${envWorkers.toLocaleString("en-US")} env workers (${scenario.tasks.map((t) => `${t.name} ${t.envWorkers}x${t.sessionsPerWorker}`).join(", ")}), ${scenario.rolloutSlots} rollout slots, ${scenario.policyServers} policy servers (${scenario.decode}), ${scenario.trainerDevices} trainer devices (${scenario.trainer}), ${scenario.controllers} controller(s)`,
    `  window ${scenario.windowGroups} groups of ${scenario.groupSize}, ${scenario.batchGroups} groups per step, maxStaleness ${scenario.maxStaleness}; ${scenario.steps} steps simulated (${f(r.simulatedSeconds, 0)} s simulated, ${r.events.toLocaleString("en-US")} events, ${f(wallSeconds, 1)} s wall)${r.truncated ? "  ** stopped by the event cap" : ""}`,
    "",
    `throughput: ${f(r.trajectoriesPerS)} trajectories/s, ${f(r.generatedTokensPerS, 0)} generated tokens/s, ${f(r.trainedTokensPerS, 0)} trained tokens/s`,
    `bottleneck: ${report.bottleneck}`,
    `  episode ${f(r.meanEpisodeSeconds)} s, group (request to last member) ${f(r.meanGroupSeconds)} s, step + publish ${f(r.meanHoldSeconds)} s; ${f(r.meanOutstanding, 1)} of ${r.windowEpisodes} episodes outstanding on average`,
    "utilisation:",
    ...r.utilisation.map((u) => `  ${u.role.padEnd(32)} ${pct(u.utilisation).padStart(5)}`),
    `staleness (versions behind when trained): ${r.staleness.map((c, i) => `${i}: ${pct(staleTotal > 0 ? c / staleTotal : 0)}`).join(", ")}; beyond maxStaleness ${scenario.maxStaleness}: ${pct(r.staleBeyondBound)}`,
    "AWS limits:",
    ...report.limits.map(
      (l) =>
        `  ${l.limit.padEnd(48)} ${f(l.rate, 1).padStart(12)} of ${l.value.toLocaleString("en-US")} (${pct(l.share)})`,
    ),
    `cost (${calibration.aws.region}, prices as of ${calibration.aws.date}):`,
    ...report.bill.lines.map(
      (l) =>
        `  ${l.item.padEnd(22)} ${String(l.count).padStart(7)}  ${l.instance.padEnd(26)} $${f(l.onDemandPerHour)}/h on demand, $${f(l.spotPerHour)}/h spot`,
    ),
    `  total $${f(report.bill.onDemandPerHour)}/h on demand ($${f(report.bill.onDemandPer1M)} per 1M trajectories), $${f(report.bill.spotPerHour)}/h spot ($${f(report.bill.spotPer1M)} per 1M)`,
    "sources: every figure of the calibration names its source (measured here / published / assumption / fitted): calibration/calibration.json; docs/scale.md",
  ];
  return lines;
}
