/**
 * Multi-process test consumer: prints "ready", then receives and deletes until a long poll comes
 * back empty after the parent has marked that everything was sent (the file named by
 * AGENTRL_DRAIN_DONE_FILE exists), and prints the ids it got as JSON. A drainer that got nothing
 * (its siblings were faster) still stops.
 */
import { existsSync } from "node:fs";
import { TransportConfig } from "../../../shared/config/transport.ts";
import { parseJsonOrThrow } from "../../../shared/errors.ts";
import { createTransport } from "../../../shared/transport/index.ts";

const config = parseJsonOrThrow(TransportConfig, process.env.AGENTRL_CRASH_CONFIG ?? "", "AGENTRL_CRASH_CONFIG");
const transport = await createTransport(config, { ensureResources: false });
const queue = transport.queue("trajectories");
process.stdout.write("ready\n");
const ids: string[] = [];
for (;;) {
  const batch = await queue.receive({ maxMessages: 10, waitSeconds: 2 });
  if (batch.length === 0 && existsSync(process.env.AGENTRL_DRAIN_DONE_FILE ?? "")) break;
  for (const message of batch) {
    ids.push(message.id);
    await queue.delete(message.receiptHandle);
  }
}
process.stdout.write(`${JSON.stringify({ received: ids })}\n`);
await transport.close();
