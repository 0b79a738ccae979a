/**
 * `npm run bench:controller` — the controller's latency and CPU under an open-loop load.
 *
 * Processes: the controller (one process, with both secrets set, as deployed), `--worker-procs`
 * processes hosting `--workers` example task workers, and `--clients` load-generating clients.
 * The clients first open `--sessions` sessions and keep that many open, then send requests at
 * fixed rates, each for `--phase-s` seconds: an open loop, so a slow controller cannot slow the
 * clients down and hide its queueing. Latency runs from when a request was due, not from when it
 * left (no coordinated omission). Each client slot walks one session through
 * add, add, add, add, start_sample (its successor), answer (the episode ends): two thirds of the
 * requests are non-final interacts, a sixth starts sessions and a sixth ends them, and never
 * fewer than `--sessions` sessions are open.
 *
 * Per rate: achieved throughput, p50/p99, and the CPU time of the controller process per answered
 * request (process.cpuUsage() read over IPC before and after the phase), of the workers and the
 * clients.
 * The rates 250, 500, 1000, 2000 req/s always run, with 1500 in between; past 2000 the rate
 * climbs until the controller no longer keeps up. A rate is kept up when the achieved throughput
 * is at least 95% of the offered rate, under 1% of requests fail and p99 stays under
 * `--p99-bound-ms`; the saturation rate is the highest rate kept up with every lower one kept up.
 *
 * The example task's tools are instant, so the figures are the controller path plus the worker's
 * own HTTP handling. Clients, workers and controller share the machine's cores: on a small or
 * busy machine the saturation rate is the machine's, not the controller's (see the CPU columns).
 *
 * The controller's event loop is one thread, so 1000 / (its CPU ms per request) is the rate one
 * core could carry if the controller had it to itself: `controllerCeilingReqPerS`, the figure to
 * read beside the saturation rate on a shared machine.
 *
 * The last line is one JSON object: {p99MsAt1000, saturationReqPerS, sessionsHeld, ...}.
 *
 * Options: --sessions 10000 --workers 4 --worker-procs 2 --clients 2 --phase-s 5 --p99-bound-ms 50
 *          --max-rate 16000 --budget-s 420 --controller-module functions/controller/controller.ts
 *          --cpu-prof-dir DIR (writes the controller's V8 CPU profile there on exit)
 */
import { type ChildProcess, spawn } from "node:child_process";
import { Agent, request } from "node:http";
import { cpus, loadavg } from "node:os";
import { resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { z } from "zod";
import { exampleNumbers, exampleTask } from "../env-images/example/index.ts";
import type { RunningController } from "../functions/controller/controller.ts";
import { readScriptArgs, validateScriptArgs } from "../shared/commandLine.ts";
import { type RunningWorker, serveTask } from "../shared/env/worker.ts";
import { createLogger } from "../shared/log.ts";
import { ControllerSummary, printSummary } from "./summary.ts";

const SCRIPT = {
  command: "npm run bench:controller --",
  usage:
    "[--sessions N] [--workers N] [--worker-procs N] [--clients N] [--phase-s N] " +
    "[--p99-bound-ms N] [--max-rate N] [--budget-s N] [--controller-module PATH] [--cpu-prof-dir DIR]",
};

const Options = z.object({
  sessions: z.coerce.number().int().min(1).default(10_000),
  workers: z.coerce.number().int().min(1).default(4),
  "worker-procs": z.coerce.number().int().min(1).default(2),
  clients: z.coerce.number().int().min(1).default(2),
  "phase-s": z.coerce.number().positive().default(5),
  "p99-bound-ms": z.coerce.number().positive().default(50),
  "max-rate": z.coerce.number().int().min(2000).default(16_000),
  "budget-s": z.coerce.number().int().min(10).default(420),
  "controller-module": z.string().default("functions/controller/controller.ts"),
  "cpu-prof-dir": z.string().optional(),
});
type Options = z.infer<typeof Options>;

const REQUIRED_RATES = [250, 500, 1000, 1500, 2000];
const ENV_SECRET = "bench-env-secret-0123456789abcdef";
const CONTROLLER_SECRET = "bench-controller-secret-0123456789";
const repoRoot = fileURLToPath(new URL("..", import.meta.url));

// ---- messages between the bench's processes (IPC) ----------------------------------------------

const CpuReport = z.object({ type: z.literal("cpu"), userUs: z.number(), systemUs: z.number() });
const Ready = z.object({ type: z.literal("ready"), url: z.string(), sessions: z.number().optional() });
const Opened = z.object({ type: z.literal("opened"), ok: z.number(), failed: z.number() });
const PhaseResult = z.object({
  type: z.literal("phaseDone"),
  due: z.number(),
  ok: z.number(),
  skipped: z.number(),
  unfinished: z.number(),
  errors: z.record(z.string(), z.number()),
  windowMs: z.number(),
  latencies: z.array(z.number()),
});
type PhaseResult = z.infer<typeof PhaseResult>;
const Command = z.discriminatedUnion("type", [
  z.object({ type: z.literal("cpu") }),
  z.object({ type: z.literal("sessions") }),
  z.object({ type: z.literal("stop") }),
  z.object({ type: z.literal("open"), count: z.number(), firstIndex: z.number() }),
  z.object({ type: z.literal("phase"), rate: z.number(), seconds: z.number() }),
]);
type Command = z.infer<typeof Command>;
const SessionsReport = z.object({ type: z.literal("sessions"), held: z.number() });

function send(message: unknown): void {
  process.send?.(message);
}

function onCommand(handler: (command: Command) => void | Promise<void>): void {
  process.on("message", (raw) => void handler(Command.parse(raw)));
  // The parent gone: nothing left to measure for.
  process.on("disconnect", () => process.exit(0));
}

function cpuReport(): z.infer<typeof CpuReport> {
  const { user, system } = process.cpuUsage();
  return { type: "cpu", userUs: user, systemUs: system };
}

// ---- child roles --------------------------------------------------------------------------------

/** The controller under test, from `--controller-module` (another build can be compared). */
async function hostController(options: Options): Promise<void> {
  const modulePath = pathToFileURL(resolve(repoRoot, options["controller-module"])).href;
  const { startController } = (await import(modulePath)) as {
    startController: (o: Record<string, unknown>) => Promise<RunningController>;
  };
  const running = await startController({
    port: 0,
    envSecret: ENV_SECRET,
    controllerSecret: CONTROLLER_SECRET,
    log: createLogger({ role: "controller" }),
  });
  onCommand(async (command) => {
    if (command.type === "cpu") send(cpuReport());
    else if (command.type === "sessions")
      send({ type: "sessions", held: Object.keys(running.controller.listSessions()).length });
    else if (command.type === "stop") {
      await running.close();
      // A normal exit, so that --cpu-prof writes its profile.
      process.exit(0);
    }
  });
  send({ type: "ready", url: running.url });
}

/** A share of the example workers, registered with the controller. */
async function hostWorkers(controllerUrl: string, count: number, slots: number): Promise<void> {
  const workers: RunningWorker[] = [];
  for (let i = 0; i < count; i++) {
    workers.push(
      await serveTask(exampleTask, { controllerUrl, concurrency: slots, heartbeatMs: 1_000, envSecret: ENV_SECRET }),
    );
  }
  onCommand((command) => {
    if (command.type === "cpu") send(cpuReport());
  });
  send({ type: "ready", url: workers.map((w) => w.url).join(",") });
}

/** One client slot: the session it walks through its episode, and its successor once started. */
interface Slot {
  current: number | undefined;
  turns: number;
  next: number | undefined;
  busy: boolean;
  index: number;
}

interface Reply {
  status: number;
  sessionId: number | undefined;
  body: string;
}

/** A load-generating client: plain node:http with keep-alive, so that its own CPU stays small. */
async function runClient(controllerUrl: string): Promise<void> {
  const url = new URL(controllerUrl);
  const agent = new Agent({ keepAlive: true, maxSockets: 256, scheduling: "lifo" });
  const auth = `Bearer ${CONTROLLER_SECRET}`;
  const [x, y] = exampleNumbers(0);
  const addBody = JSON.stringify({ messages: [toolCall("add", { a: x, b: y })] });
  const answerBody = JSON.stringify({ messages: [toolCall("answer", { value: 0 })] });
  const slots: Slot[] = [];

  const post = (path: string, body: string, sessionId?: number): Promise<Reply> =>
    new Promise((done) => {
      const headers: Record<string, string> = {
        "content-type": "application/json",
        "content-length": String(Buffer.byteLength(body)),
        authorization: auth,
      };
      if (sessionId !== undefined) headers.session_id = String(sessionId);
      const req = request(
        { host: url.hostname, port: url.port, path, method: "POST", headers, agent, timeout: 60_000 },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (chunk: Buffer) => chunks.push(chunk));
          res.on("end", () => {
            const header = res.headers.session_id;
            done({
              status: res.statusCode ?? 0,
              sessionId: typeof header === "string" ? Number(header) : undefined,
              body: Buffer.concat(chunks).toString(),
            });
          });
          res.on("error", (error: NodeJS.ErrnoException) =>
            done({ status: -1, sessionId: undefined, body: error.code ?? error.message }),
          );
        },
      );
      req.on("timeout", () => req.destroy(Object.assign(new Error("timeout"), { code: "TIMEOUT" })));
      req.on("error", (error: NodeJS.ErrnoException) =>
        done({ status: -1, sessionId: undefined, body: error.code ?? error.message }),
      );
      req.end(body);
    });

  /** Starts a session: its id, or why not. */
  const start = async (index: number): Promise<{ id: number | undefined; error: string }> => {
    const reply = await post("/api/start_sample", JSON.stringify({ name: "example", index }));
    return reply.status === 200 && reply.sessionId !== undefined
      ? { id: reply.sessionId, error: "" }
      : { id: undefined, error: `start_sample ${failure(reply)}` };
  };

  /** One visit of a slot: the next step of its session's episode. Resolves with an error class or "". */
  const visit = async (slot: Slot): Promise<string> => {
    if (slot.current === undefined) {
      const started = await start(slot.index);
      slot.current = started.id;
      slot.turns = 0;
      return started.error;
    }
    if (slot.turns < 4) {
      const reply = await post("/api/interact", addBody, slot.current);
      slot.turns += 1;
      if (reply.status === 200 && statusOf(reply.body) === "running") return "";
      slot.current = undefined;
      return reply.status === 200 ? `ended early: ${statusOf(reply.body)}` : failure(reply);
    }
    if (slot.next === undefined) {
      const started = await start(slot.index);
      slot.next = started.id;
      return started.error;
    }
    const reply = await post("/api/interact", answerBody, slot.current);
    slot.current = slot.next;
    slot.next = undefined;
    slot.turns = 0;
    return reply.status === 200 ? "" : failure(reply);
  };

  const open = async (count: number, firstIndex: number): Promise<void> => {
    let ok = 0;
    let next = 0;
    const lane = async () => {
      for (let i = next++; i < count; i = next++) {
        const slot: Slot = {
          current: undefined,
          turns: 0,
          next: undefined,
          busy: false,
          index: (firstIndex + i) % 1000,
        };
        slots.push(slot);
        if ((await visit(slot)) === "") ok += 1;
      }
    };
    await Promise.all(Array.from({ length: 32 }, lane));
    send({ type: "opened", ok, failed: count - ok });
  };

  /** Sends `rate` visits per second for `seconds`, each due at its own time, whether or not earlier ones returned. */
  const phase = async (rate: number, seconds: number): Promise<void> => {
    const latencies: number[] = [];
    const errors: Record<string, number> = {};
    const total = Math.round(rate * seconds);
    let sent = 0;
    let skipped = 0;
    let inflight = 0;
    let cursor = 0;
    let lastDone = 0;
    const t0 = performance.now();
    const fire = (due: number) => {
      const slot = slots[cursor++ % slots.length];
      if (!slot || slot.busy) {
        skipped += 1;
        return;
      }
      slot.busy = true;
      inflight += 1;
      void visit(slot).then((error) => {
        slot.busy = false;
        inflight -= 1;
        lastDone = performance.now();
        if (error) errors[error] = (errors[error] ?? 0) + 1;
        else latencies.push(lastDone - due);
      });
    };
    await new Promise<void>((finished) => {
      const tick = () => {
        const now = performance.now();
        const dueNow = Math.min(total, Math.floor(((now - t0) * rate) / 1000) + 1);
        while (sent < dueNow) fire(t0 + (sent++ * 1000) / rate);
        if (sent < total) setTimeout(tick, 1);
        else finished();
      };
      tick();
    });
    // Let what is in flight finish (bounded): what does not is counted as unfinished.
    const drainUntil = performance.now() + 10_000;
    while (inflight > 0 && performance.now() < drainUntil) await new Promise((r) => setTimeout(r, 5));
    send({
      type: "phaseDone",
      due: total,
      ok: latencies.length,
      skipped,
      unfinished: inflight,
      errors,
      windowMs: Math.max(seconds * 1000, lastDone - t0),
      latencies,
    } satisfies PhaseResult);
  };

  onCommand(async (command) => {
    if (command.type === "cpu") send(cpuReport());
    else if (command.type === "open") await open(command.count, command.firstIndex);
    else if (command.type === "phase") await phase(command.rate, command.seconds);
  });
  send({ type: "ready", url: controllerUrl });
}

function toolCall(name: string, args: Record<string, number>) {
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_0", type: "function", function: { name, arguments: JSON.stringify(args) } }],
  };
}

/** An error class for the phase report: the HTTP status, or the socket error's code. */
function failure(reply: Reply): string {
  return reply.status === -1 ? `socket ${reply.body}` : `HTTP ${reply.status}`;
}

/** The episode status of a reply body, read the cheap way (the client's CPU is not what we measure). */
function statusOf(body: string): string {
  return /"status":"([^"]*)"/.exec(body)?.[1] ?? "unreadable";
}

// ---- the orchestrator ---------------------------------------------------------------------------

const children: ChildProcess[] = [];

/** A child process running this file in `role`, with an IPC channel. */
class Child {
  private readonly waiting: Array<(message: unknown) => void> = [];
  readonly process: ChildProcess;

  constructor(role: string, env: Record<string, string>, nodeFlags: string[] = []) {
    this.process = spawn(process.execPath, [...nodeFlags, "--import", "tsx", "bench/controller.ts", ...argv()], {
      cwd: repoRoot,
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      env: { ...process.env, AGENTRL_LOG_LEVEL: "warn", BENCH_ROLE: role, ...env },
    });
    children.push(this.process);
    this.process.on("message", (message) => this.waiting.shift()?.(message));
    this.process.once("exit", (code, signal) => {
      if (!stopping) fail(new Error(`bench ${role} process exited (${code ?? signal})`));
    });
  }

  /** The next message, parsed with `schema`. */
  next<S extends z.ZodType>(schema: S): Promise<z.output<S>> {
    return new Promise((done) => this.waiting.push((message) => done(schema.parse(message))));
  }

  ask<S extends z.ZodType>(command: Command, schema: S): Promise<z.output<S>> {
    const reply = this.next(schema);
    this.process.send(command);
    return reply;
  }

  async cpuMs(): Promise<number> {
    const cpu = await this.ask({ type: "cpu" }, CpuReport);
    return (cpu.userUs + cpu.systemUs) / 1000;
  }
}

let stopping = false;
function argv(): string[] {
  return process.argv.slice(2);
}

function fail(error: unknown): never {
  process.stderr.write(
    `bench:controller failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  stopChildren();
  process.exit(1);
}

function stopChildren(which: readonly ChildProcess[] | readonly Child[] = children): void {
  stopping = true;
  for (const entry of which) {
    const child = entry instanceof Child ? entry.process : entry;
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  }
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);
const load = () =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");

interface Row {
  rate: number;
  achieved: number;
  ok: number;
  failed: number;
  p50: number;
  p99: number;
  controllerMsPerReq: number;
  controllerCores: number;
  workersMsPerReq: number;
  clientsMsPerReq: number;
  load1: number;
  keptUp: boolean;
}

async function cpuOf(group: readonly Child[]): Promise<number> {
  return sum(await Promise.all(group.map((c) => c.cpuMs())));
}

async function runPhase(
  rate: number,
  seconds: number,
  controller: Child,
  workers: readonly Child[],
  clients: readonly Child[],
  boundMs: number,
): Promise<Row> {
  const before = await Promise.all([controller.cpuMs(), cpuOf(workers), cpuOf(clients)]);
  const results: PhaseResult[] = await Promise.all(
    clients.map((c) => c.ask({ type: "phase", rate: rate / clients.length, seconds }, PhaseResult)),
  );
  const after = await Promise.all([controller.cpuMs(), cpuOf(workers), cpuOf(clients)]);
  const latencies = results.flatMap((r) => r.latencies).sort((a, b) => a - b);
  const ok = latencies.length;
  const due = sum(results.map((r) => r.due));
  const failed = due - ok;
  const windowS = Math.max(...results.map((r) => r.windowMs)) / 1000;
  const achieved = ok / windowS;
  // Per answered request (errors included): a request that was never sent or never answered
  // cost the controller little, one that failed cost it as much as one that succeeded.
  const answered = sum(results.map((r) => r.due - r.skipped - r.unfinished));
  const perReq = (i: number) => ((after[i] ?? 0) - (before[i] ?? 0)) / Math.max(1, answered);
  const p99 = percentile(latencies, 99);
  for (const r of results) {
    const extra = r.skipped || r.unfinished ? ` (${r.skipped} slots busy, ${r.unfinished} unfinished)` : "";
    if (Object.keys(r.errors).length || extra)
      process.stdout.write(`  ${rate} req/s: ${JSON.stringify(r.errors)}${extra}\n`);
  }
  return {
    rate,
    achieved,
    ok,
    failed,
    p50: percentile(latencies, 50),
    p99,
    controllerMsPerReq: perReq(0),
    controllerCores: ((after[0] ?? 0) - (before[0] ?? 0)) / 1000 / windowS,
    workersMsPerReq: perReq(1),
    clientsMsPerReq: perReq(2),
    load1: loadavg()[0] ?? Number.NaN,
    keptUp: achieved >= 0.95 * rate && failed <= 0.01 * due && p99 <= boundMs,
  };
}

function formatRow(r: Row): string {
  const cells = [
    String(r.rate).padStart(6),
    r.achieved.toFixed(0).padStart(8),
    String(r.ok).padStart(7),
    String(r.failed).padStart(6),
    r.p50.toFixed(2).padStart(8),
    r.p99.toFixed(2).padStart(8),
    r.controllerMsPerReq.toFixed(3).padStart(9),
    r.controllerCores.toFixed(2).padStart(6),
    r.workersMsPerReq.toFixed(3).padStart(9),
    r.clientsMsPerReq.toFixed(3).padStart(9),
    r.load1.toFixed(2).padStart(6),
    r.keptUp ? "  yes" : "   no",
  ];
  return cells.join(" ");
}

async function main(options: Options): Promise<void> {
  const t0 = performance.now();
  process.stdout.write(`node ${process.version}, ${cpus().length} cores, load average ${load()}\n`);
  const profile = options["cpu-prof-dir"];
  const controller = new Child("controller", {}, profile ? ["--cpu-prof", `--cpu-prof-dir=${profile}`] : []);
  const { url } = await controller.next(Ready);
  // 20% spare slots: a slot holds two sessions between its successor's start and its answer.
  const perWorker = Math.ceil((options.sessions * 1.25) / options.workers);
  const procs = Math.min(options["worker-procs"], options.workers);
  const workers = Array.from(
    { length: procs },
    (_, i) =>
      new Child("workers", {
        BENCH_CONTROLLER_URL: url,
        BENCH_WORKER_COUNT: String(Math.floor(options.workers / procs) + (i < options.workers % procs ? 1 : 0)),
        BENCH_SLOTS: String(perWorker),
      }),
  );
  await Promise.all(workers.map((w) => w.next(Ready)));
  const clients = Array.from({ length: options.clients }, () => new Child("client", { BENCH_CONTROLLER_URL: url }));
  await Promise.all(clients.map((c) => c.next(Ready)));
  await waitForWorkers(url, options.workers);
  process.stdout.write(
    `controller ${url} (${options["controller-module"]}); ${options.workers} example workers x ${perWorker} slots in ${procs} processes; ` +
      `${options.clients} client processes; ready in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
  );

  const openedAt = performance.now();
  const share = Math.ceil(options.sessions / options.clients);
  const opened = await Promise.all(
    clients.map((c, i) =>
      c.ask({ type: "open", count: Math.min(share, options.sessions - i * share), firstIndex: i * share }, Opened),
    ),
  );
  const openS = (performance.now() - openedAt) / 1000;
  const openedOk = sum(opened.map((o) => o.ok));
  const heldAfterOpen = (await controller.ask({ type: "sessions" }, SessionsReport)).held;
  process.stdout.write(
    `opened ${openedOk} of ${options.sessions} sessions in ${openS.toFixed(1)} s (${(openedOk / openS).toFixed(0)} start_sample/s, closed loop, 32 in flight per client); ` +
      `controller holds ${heldAfterOpen}; load average ${load()}\n`,
  );

  // Warm-up (JIT, keep-alive pools), not reported.
  await runPhase(250, 1, controller, workers, clients, options["p99-bound-ms"]);

  const header =
    "  rate achieved      ok failed  p50(ms)  p99(ms) ctl ms/req ctl cores wrk ms/req cli ms/req  load1 kept up";
  process.stdout.write(
    `\nopen loop, ${options["phase-s"]} s per rate; latency from when each request was due; CPU per answered request\n${header}\n`,
  );
  const rows: Row[] = [];
  let minHeld = heldAfterOpen;
  const ladder = [...REQUIRED_RATES];
  for (let rate = 3000; rate <= options["max-rate"]; rate = rate < 4000 ? rate + 1000 : rate * 1.5) ladder.push(rate);
  for (const rate of ladder) {
    const row = await runPhase(rate, options["phase-s"], controller, workers, clients, options["p99-bound-ms"]);
    rows.push(row);
    process.stdout.write(`${formatRow(row)}\n`);
    minHeld = Math.min(minHeld, (await controller.ask({ type: "sessions" }, SessionsReport)).held);
    if (rate > 2000 && !row.keptUp) break;
    // Let queues empty before the next rate.
    await new Promise((r) => setTimeout(r, 500));
  }

  let saturation = 0;
  for (const row of rows) {
    if (!row.keptUp) break;
    saturation = row.rate;
  }
  const at1000 = rows.find((r) => r.rate === 1000);
  // What one core would carry if the controller had it to itself (its event loop is one thread):
  // the bound its own CPU cost sets, whatever the machine's other processes take.
  const ceiling = at1000 ? 1000 / at1000.controllerMsPerReq : Number.NaN;
  process.stdout.write(
    `\nsaturation (highest rate kept up, every lower one too): ${saturation} req/s; sessions held at least ${minHeld}; ` +
      `p99 bound ${options["p99-bound-ms"]} ms; the controller's CPU at 1000 req/s bounds one core to ${ceiling.toFixed(0)} req/s; total ${((performance.now() - t0) / 1000).toFixed(0)} s; load average ${load()}\n`,
  );
  // Clients and workers first, so that no heartbeat complains about the stopped controller.
  stopChildren([...clients, ...workers]);
  controller.process.send({ type: "stop" } satisfies Command);
  await new Promise((r) => controller.process.once("exit", r));
  if (profile) process.stdout.write(`controller CPU profile written under ${profile}\n`);
  printSummary(ControllerSummary, {
    p99MsAt1000: round(at1000?.p99),
    saturationReqPerS: saturation,
    sessionsHeld: minHeld,
    p50MsAt1000: round(at1000?.p50),
    controllerCpuMsPerReqAt1000: round(at1000?.controllerMsPerReq, 3),
    controllerCeilingReqPerS: round(ceiling, 0),
    loadAverage1: round(loadavg()[0]),
    cores: cpus().length,
  });
}

function round(value: number | undefined, digits = 2): number | null {
  return value === undefined || !Number.isFinite(value) ? null : Number(value.toFixed(digits));
}

async function waitForWorkers(url: string, count: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const response = await fetch(`${url}/api/list_workers`, {
      headers: { authorization: `Bearer ${CONTROLLER_SECRET}` },
    });
    const listing = z
      .record(z.string(), z.object({ workers: z.record(z.string(), z.object({ status: z.string() })) }))
      .parse(await response.json());
    const alive = Object.values(listing.example?.workers ?? {}).filter((w) => w.status === "ALIVE").length;
    if (alive === count) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${count} workers did not register within 30 s`);
}

function parseOptions(): Options {
  const { values } = readScriptArgs(SCRIPT, {
    options: Object.fromEntries(Object.keys(Options.shape).map((key) => [key, { type: "string" as const }])),
  });
  return validateScriptArgs(SCRIPT, Options, values);
}

const role = process.env.BENCH_ROLE;
const options = parseOptions();
if (role === "controller") void hostController(options).catch(fail);
else if (role === "workers")
  void hostWorkers(
    process.env.BENCH_CONTROLLER_URL ?? "",
    Number(process.env.BENCH_WORKER_COUNT),
    Number(process.env.BENCH_SLOTS),
  ).catch(fail);
else if (role === "client") void runClient(process.env.BENCH_CONTROLLER_URL ?? "").catch(fail);
else {
  const budget = setTimeout(
    () => fail(new Error(`over its ${options["budget-s"]} s budget (--budget-s)`)),
    options["budget-s"] * 1000,
  );
  main(options)
    .then(() => {
      clearTimeout(budget);
      stopChildren();
      process.exit(0);
    })
    .catch(fail);
}
