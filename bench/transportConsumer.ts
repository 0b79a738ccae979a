/**
 * The other process of bench:transport's wake phase: long-polls `rollout-requests` on the
 * transport given as JSON, and reports how long after its send each message was received (the
 * body is the send time) and how much CPU it used while idle, waiting for the first message.
 * Prints `ready` once polling, and one JSON line when the body `end` arrives.
 */
import { TransportConfig } from "../shared/config/transport.ts";
import { createTransport } from "../shared/transport/index.ts";

/** Idle CPU is measured from this long after `ready` (start-up work left behind) to the first message. */
const SETTLE_MS = 1_000;

const config = TransportConfig.parse(JSON.parse(process.argv[2] ?? "{}"));
const transport = await createTransport(config);
const queue = transport.queue("rollout-requests");
const latenciesMs: number[] = [];
let idleFrom: { at: number; cpu: NodeJS.CpuUsage } | undefined;
let idleCpuPercent: number | undefined;
setTimeout(() => {
  idleFrom = { at: performance.now(), cpu: process.cpuUsage() };
}, SETTLE_MS);
process.stdout.write("ready\n");
for (;;) {
  const [message] = await queue.receive({ maxMessages: 1, waitSeconds: 20 });
  if (!message) continue;
  const now = performance.timeOrigin + performance.now();
  if (idleCpuPercent === undefined && idleFrom) {
    const used = process.cpuUsage(idleFrom.cpu);
    idleCpuPercent = (100 * (used.user + used.system)) / 1000 / (performance.now() - idleFrom.at);
  }
  await queue.delete(message.receiptHandle);
  if (message.body === "end") break;
  latenciesMs.push(now - Number(message.body));
}
process.stdout.write(`${JSON.stringify({ latenciesMs, idleCpuPercent: idleCpuPercent ?? null })}\n`);
await transport.close();
