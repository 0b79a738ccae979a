/**
 * Crash-test writer: forever overwrites `big` and creates `versions/<i>` (putIfAbsent), each
 * AGENTRL_CRASH_BYTES bytes filled with i % 256, announcing each step on stdout so the test can
 * SIGKILL it in the middle of a write.
 */
import { TransportConfig } from "../../../shared/config/transport.ts";
import { parseJsonOrThrow } from "../../../shared/errors.ts";
import { createTransport } from "../../../shared/transport/index.ts";

const config = parseJsonOrThrow(TransportConfig, process.env.AGENTRL_CRASH_CONFIG ?? "", "AGENTRL_CRASH_CONFIG");
const bytes = Number(process.env.AGENTRL_CRASH_BYTES);
const transport = await createTransport(config, { ensureResources: false });
const store = transport.store("checkpoints");
for (let i = 1; ; i++) {
  const body = new Uint8Array(bytes).fill(i % 256);
  process.stdout.write(`writing ${i}\n`);
  await store.put("big", body);
  await store.putIfAbsent(`versions/${i}`, body);
  process.stdout.write(`wrote ${i}\n`);
}
