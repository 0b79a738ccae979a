/**
 * `npm run bench:controller` — controller throughput on loopback.
 *
 * Starts the controller (`agentrl controller`) and one child process hosting several `example`
 * task workers, each on its own port with its own slots and heartbeats (one host process instead
 * of one per worker keeps start-up short on a small machine). The example's
 * `add` tool is instant, so the figures measure the controller path: routing, pinning, the
 * proxied worker call and zod validation at both ends), opens N sessions and holds them all
 * open at once, then sends one non-final turn to each, and prints requests/s and p50/p99
 * latency for start_sample and interact. Bounded: the whole run aborts after `--budget-s`.
 *
 * Options: --sessions 10000 --workers 4 --inflight 64 --budget-s 110
 */
import { type ChildProcess, spawn } from "node:child_process";
import { cpus, loadavg } from "node:os";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { exampleNumbers, exampleTask } from "../env-images/example/index.ts";
import { ControllerClient } from "../shared/env/client.ts";
import { type RunningWorker, serveTask } from "../shared/env/worker.ts";
import type { AssistantMessage } from "../shared/protocol/openai.ts";

const args = parseArgs(process.argv.slice(2));
const SESSIONS = args.sessions ?? 10_000;
const WORKERS = args.workers ?? 4;
const INFLIGHT = args.inflight ?? 64;
const BUDGET_MS = (args["budget-s"] ?? 110) * 1000;
const repoRoot = fileURLToPath(new URL("..", import.meta.url));
const children: ChildProcess[] = [];

function parseArgs(argv: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i]?.replace(/^--/, "");
    const value = Number(argv[i + 1]);
    if (!key || !Number.isSafeInteger(value) || value < 1) {
      throw new Error(
        `usage: tsx bench/controller.ts [--sessions N] [--workers N] [--inflight N] [--budget-s N]; got ${argv.join(" ")}`,
      );
    }
    out[key] = value;
  }
  return out;
}

/** Spawns `node <args>` and resolves with the JSON of its first stdout line ("listening"). */
async function spawnRole(nodeArgs: string[], env: Record<string, string> = {}): Promise<{ url: string }> {
  const child = spawn(process.execPath, nodeArgs, {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, AGENTRL_LOG_LEVEL: "warn", ...env },
  });
  children.push(child);
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  return new Promise((resolve, reject) => {
    lines.once("line", (line) => resolve(JSON.parse(line) as { url: string }));
    child.once("exit", (code) => reject(new Error(`node ${nodeArgs.join(" ")} exited with ${code}`)));
  });
}

/** Worker-host mode (the child): serves WORKERS example workers registered with the controller. */
async function hostWorkers(controllerUrl: string, slots: number): Promise<void> {
  const workers: RunningWorker[] = [];
  for (let i = 0; i < WORKERS; i++) {
    workers.push(await serveTask(exampleTask, { controllerUrl, concurrency: slots, heartbeatMs: 1_000 }));
  }
  process.stdout.write(`${JSON.stringify({ url: workers.map((w) => w.url).join(",") })}\n`);
  process.once("SIGTERM", () => void Promise.all(workers.map((w) => w.close())).then(() => process.exit(0)));
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

interface Phase {
  readonly done: number;
  readonly wallMs: number;
  readonly latencies: number[];
  readonly errors: Record<string, number>;
}

/**
 * Runs `job(i)` for i in [0, n) with at most `inflight` at once, launching nothing after
 * `deadline` (performance.now() time) so the run stays bounded on a slow machine. Failures are
 * counted by error class, not thrown.
 */
async function drive(n: number, inflight: number, deadline: number, job: (i: number) => Promise<void>): Promise<Phase> {
  const latencies: number[] = [];
  const errors: Record<string, number> = {};
  let next = 0;
  const started = performance.now();
  const lane = async () => {
    for (;;) {
      const i = next++;
      if (i >= n || performance.now() > deadline) return;
      const t0 = performance.now();
      try {
        await job(i);
        latencies.push(performance.now() - t0);
      } catch (error) {
        const name = error instanceof Error ? error.name : "Error";
        errors[name] = (errors[name] ?? 0) + 1;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(inflight, n) }, lane));
  return {
    done: latencies.length,
    wallMs: performance.now() - started,
    latencies: latencies.sort((x, y) => x - y),
    errors,
  };
}

function report(name: string, phase: Phase): string {
  const rate = phase.done / (phase.wallMs / 1000);
  const errors = Object.keys(phase.errors).length ? `  errors ${JSON.stringify(phase.errors)}` : "";
  return (
    `${name.padEnd(13)} ${String(phase.done).padStart(6)} ok  ${rate.toFixed(0).padStart(6)} req/s  ` +
    `p50 ${percentile(phase.latencies, 50).toFixed(1)} ms  p99 ${percentile(phase.latencies, 99).toFixed(1)} ms${errors}`
  );
}

function addCall(index: number): AssistantMessage {
  const [x, y] = exampleNumbers(index);
  return {
    role: "assistant",
    content: null,
    tool_calls: [
      { id: "call_0", type: "function", function: { name: "add", arguments: JSON.stringify({ a: x, b: y }) } },
    ],
  };
}

async function main(): Promise<void> {
  const perWorker = Math.ceil((SESSIONS * 1.05) / WORKERS);
  const t0 = performance.now();
  const controller = await spawnRole(["bin/agentrl.mjs", "controller", "--port", "0"]);
  await spawnRole(["--import", "tsx", "bench/controller.ts", ...process.argv.slice(2)], {
    BENCH_HOST_WORKERS: controller.url,
    BENCH_SLOTS: String(perWorker),
  });
  // No client retries: a retried start after a timeout would open a second session.
  const client = new ControllerClient({ baseUrl: controller.url, maxRetries: 0, requestTimeoutMs: 60_000 });
  for (;;) {
    const listing = await client.listWorkers();
    const alive = Object.values(listing.example?.workers ?? {}).filter((w) => w.status === "ALIVE").length;
    if (alive === WORKERS) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  process.stdout.write(
    `controller ${controller.url}, ${WORKERS} example workers x ${perWorker} slots, ready in ${((performance.now() - t0) / 1000).toFixed(1)} s; ` +
      `${SESSIONS} sessions, ${INFLIGHT} requests in flight\n`,
  );

  // Starts get up to 60% of what is left of the budget, interacts most of the rest.
  const left = () => BUDGET_MS - (performance.now() - t0);
  const sessionIds: number[] = [];
  const starts = await drive(SESSIONS, INFLIGHT, performance.now() + 0.6 * left(), async (i) => {
    const sample = await client.startSample("example", i % 1000);
    sessionIds.push(sample.sessionId);
  });
  const held = Object.keys(
    (await (await fetch(`${controller.url}/api/list_sessions`)).json()) as Record<string, unknown>,
  ).length;
  const listing = await client.listWorkers();
  const spread = Object.values(listing.example?.workers ?? {}).map((w) => w.current);
  const interacts = await drive(sessionIds.length, INFLIGHT, performance.now() + left() - 8_000, async (i) => {
    const turn = await client.interact(sessionIds[i] ?? -1, addCall(i % 1000));
    if (turn.status !== "running") throw new Error(`session ${sessionIds[i]} ended unexpectedly: ${turn.status}`);
  });
  const stillHeld = Object.keys(
    (await (await fetch(`${controller.url}/api/list_sessions`)).json()) as Record<string, unknown>,
  ).length;
  await fetch(`${controller.url}/api/cancel_all`, { method: "POST" });

  process.stdout.write(
    `sessions held open at once: ${held} of ${SESSIONS} after starts, ${stillHeld} after interacts (per worker: ${spread.join(", ")})\n`,
  );
  process.stdout.write(`${report("start_sample", starts)}\n${report("interact", interacts)}\n`);
  process.stdout.write(
    `total ${((performance.now() - t0) / 1000).toFixed(1)} s; load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(" ")} on ${cpus().length} cores\n`,
  );
}

function stopChildren(): void {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
}

if (process.env.BENCH_HOST_WORKERS) {
  void hostWorkers(process.env.BENCH_HOST_WORKERS, Number(process.env.BENCH_SLOTS));
} else {
  const budget = setTimeout(() => {
    process.stderr.write(`bench:controller: over its ${BUDGET_MS / 1000} s budget; stopping\n`);
    stopChildren();
    process.exit(1);
  }, BUDGET_MS);

  main()
    .then(() => {
      clearTimeout(budget);
      stopChildren();
      process.exit(0);
    })
    .catch((error: unknown) => {
      process.stderr.write(
        `bench:controller failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
      );
      stopChildren();
      process.exit(1);
    });
}
