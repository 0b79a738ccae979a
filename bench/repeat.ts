/**
 * `npm run bench:repeat -- <bench> [--runs N] [-- <bench flags>]`: runs one bench N times in a
 * row (never two at once: they would measure each other), reads each run's JSON summary line,
 * and prints every numeric figure's runs, median and spread, (max − min) / median, so "repeated
 * runs agree within 10%" is one command. The load average before each run is printed beside it.
 *
 * The last line is one JSON object: {bench, runs, load1: [...], median: {...}, spread: {...}}.
 *
 * @example npm run bench:repeat -- policy --runs 3
 * @example npm run bench:repeat -- transport --runs 3 -- --local-only
 */
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { z } from "zod";
import { readScriptArgs } from "../shared/commandLine.ts";
import { DATA_PARALLEL_NODE_FLAGS } from "../shared/model/dataParallelFlags.ts";
import { intFlag } from "./flags.ts";
import {
  ControllerSummary,
  load1,
  PipelineSummary,
  PolicySummary,
  parseSummary,
  TrainSummary,
  TransportSummary,
} from "./summary.ts";

/** The benches whose last line this script can read, by the name after `bench:`. */
const BENCHES: Record<string, { script: string; schema: z.ZodTypeAny; nodeFlags?: readonly string[] }> = {
  policy: { script: "policy.ts", schema: PolicySummary },
  controller: { script: "controller.ts", schema: ControllerSummary },
  pipeline: { script: "pipeline.ts", schema: PipelineSummary },
  transport: { script: "transport.ts", schema: TransportSummary },
  // as `npm run bench:train` runs it
  train: { script: "train.ts", schema: TrainSummary, nodeFlags: DATA_PARALLEL_NODE_FLAGS },
};

/** Keys that describe the run rather than measure it: reported, not spread. */
const CONTEXT_KEYS = new Set(["loadAverage", "loadAverage1", "load1", "cores", "sessionsHeld"]);

/** Median of a non-empty list. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

/** (max − min) / |median|; 0 for equal values, null when the median is 0 and the values differ. */
export function spread(values: readonly number[]): number | null {
  const lo = Math.min(...values);
  const hi = Math.max(...values);
  if (hi === lo) return 0;
  const m = Math.abs(median(values));
  return m === 0 ? null : (hi - lo) / m;
}

/** Per numeric key present (non-null) in every run: its values, median and spread. */
export function summarizeRuns(
  runs: ReadonlyArray<Record<string, unknown>>,
): Array<{ key: string; values: number[]; median: number; spread: number | null }> {
  const first = runs[0] ?? {};
  return Object.keys(first)
    .filter((key) => !CONTEXT_KEYS.has(key))
    .filter((key) => runs.every((run) => typeof run[key] === "number"))
    .map((key) => {
      const values = runs.map((run) => run[key] as number);
      return { key, values, median: median(values), spread: spread(values) };
    });
}

function runOnce(script: string, args: readonly string[], nodeFlags: readonly string[] = []): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeFlags, "--import", "tsx", script, ...args], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let stdout = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      stdout += chunk;
    });
    child.on("error", reject);
    child.on("close", (code) =>
      code === 0 ? resolve(stdout) : reject(new Error(`${script} exited with ${code}:\n${stdout.slice(-2000)}`)),
    );
  });
}

async function main(): Promise<void> {
  const SCRIPT = { command: "npm run bench:repeat --", usage: "<bench> [--runs 2..20] [-- <bench flags>]" };
  const { values: flags, positionals } = readScriptArgs(SCRIPT, {
    options: { runs: { type: "string", default: "3" } },
    allowPositionals: true,
  });
  const [name, ...benchArgs] = positionals;
  const bench = name === undefined ? undefined : BENCHES[name];
  if (!bench) {
    console.error(
      `${name === undefined ? "no bench named" : `unknown bench "${name}"`}; allowed: ${Object.keys(BENCHES).join(", ")} (usage: bench:repeat -- <bench> [--runs N] [-- <bench flags>])`,
    );
    process.exit(2);
  }
  const runs = intFlag("runs", flags.runs, 2, 20);
  const script = fileURLToPath(new URL(bench.script, import.meta.url));
  const summaries: Array<Record<string, unknown>> = [];
  const loads: number[] = [];
  for (let i = 1; i <= runs; i++) {
    loads.push(load1());
    process.stderr.write(`bench:${name} run ${i}/${runs} (load average ${loads.at(-1)})\n`);
    summaries.push(
      parseSummary(bench.schema, await runOnce(script, benchArgs, bench.nodeFlags)) as Record<string, unknown>,
    );
  }
  const rows = summarizeRuns(summaries);
  const width = Math.max(...rows.map((row) => row.key.length), 6);
  console.log(`\nbench:${name}, ${runs} runs, load average before each: ${loads.join(", ")}`);
  console.log(`${"figure".padEnd(width)}  ${"median".padStart(10)}  ${"spread".padStart(7)}  runs`);
  for (const row of rows) {
    const pct = row.spread === null ? "n/a" : `${(row.spread * 100).toFixed(1)}%`;
    console.log(
      `${row.key.padEnd(width)}  ${String(Number(row.median.toPrecision(4))).padStart(10)}  ${pct.padStart(7)}  ${row.values.join(", ")}`,
    );
  }
  console.log(
    JSON.stringify({
      bench: name,
      runs,
      load1: loads,
      median: Object.fromEntries(rows.map((row) => [row.key, Number(row.median.toPrecision(6))])),
      spread: Object.fromEntries(
        rows.map((row) => [row.key, row.spread === null ? null : Number(row.spread.toFixed(4))]),
      ),
    }),
  );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) await main();
