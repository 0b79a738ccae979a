/**
 * Crash-test consumer: receives AGENTRL_CRASH_COUNT messages (visibility AGENTRL_CRASH_VISIBILITY s),
 * prints their ids as one JSON line, then idles holding them until the test SIGKILLs it.
 */
import { TransportConfig } from "../../../shared/config/transport.ts";
import { parseJsonOrThrow } from "../../../shared/errors.ts";
import { createTransport } from "../../../shared/transport/index.ts";

const config = parseJsonOrThrow(TransportConfig, process.env.AGENTRL_CRASH_CONFIG ?? "", "AGENTRL_CRASH_CONFIG");
const count = Number(process.env.AGENTRL_CRASH_COUNT);
const visibilityTimeoutSeconds = Number(process.env.AGENTRL_CRASH_VISIBILITY);
const transport = await createTransport(config, { ensureResources: false });
const queue = transport.queue("rollout-requests");
const ids = new Set<string>();
while (ids.size < count) {
  const batch = await queue.receive({ maxMessages: 10, waitSeconds: 2, visibilityTimeoutSeconds });
  for (const message of batch) ids.add(message.id);
}
process.stdout.write(`${JSON.stringify({ received: [...ids] })}\n`);
// Hold the messages (never delete) until killed.
setInterval(() => {}, 60_000);
