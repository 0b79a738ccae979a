/**
 * Multi-process test consumer: prints "ready", then receives and deletes until a 2 s long poll
 * comes back empty after it has seen at least one message, and prints the ids it got as JSON.
 */
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
  if (batch.length === 0 && ids.length > 0) break;
  for (const message of batch) {
    ids.push(message.id);
    await queue.delete(message.receiptHandle);
  }
}
process.stdout.write(`${JSON.stringify({ received: ids })}\n`);
await transport.close();
