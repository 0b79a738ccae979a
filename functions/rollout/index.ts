/** The rollout role: the agent loop with cross-policy sampling, as a queue consumer. */
import { codecOfVersion } from "../../shared/chat/checkpoint.ts";
import type { ChatCodec } from "../../shared/chat/codec.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { ControllerClient } from "../../shared/env/client.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { newestVersion, readManifest } from "../../shared/protocol/checkpoints.ts";
import { readSecrets, type Secrets } from "../../shared/security/secrets.ts";
import type { ObjectStore, Transport } from "../../shared/transport/types.ts";
import { PolicyPool, type PoolUrls } from "./pool.ts";
import type { RolloutWorkerOptions } from "./worker.ts";

export * from "./episode.ts";
export * from "./pool.ts";
export * from "./worker.ts";

/**
 * The chat codec of the newest published policy (its tokenizer.json, and the model's own chat
 * template when it was imported from Hugging Face: the same codec the policy server loads),
 * waiting up to `timeoutMs` for a first version to appear.
 */
export async function loadCodec(
  checkpoints: ObjectStore,
  timeoutMs = 60_000,
  signal?: AbortSignal,
): Promise<ChatCodec> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const version = await newestVersion(checkpoints);
    if (version !== undefined) return codecOfVersion(checkpoints, await readManifest(checkpoints, version));
    if (Date.now() > deadline || signal?.aborted)
      throw new AgentRlError(`no policy version with a tokenizer in the checkpoint store after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** Everything a worker needs beyond config and transport, from URLs. */
export async function rolloutDepsFromUrls(
  config: ExperimentConfig,
  transport: Transport,
  urls: PoolUrls & { readonly controller: string },
  signal?: AbortSignal,
  secrets: Secrets = readSecrets(),
): Promise<Pick<RolloutWorkerOptions, "env" | "pool" | "codec">> {
  return {
    env: new ControllerClient({
      baseUrl: urls.controller,
      ...(secrets.controllerSecret ? { token: secrets.controllerSecret } : {}),
    }),
    pool: new PolicyPool(config.rollout, {
      ...urls,
      ...(secrets.policyApiKey ? { apiKey: secrets.policyApiKey } : {}),
    }),
    codec: await loadCodec(transport.store("checkpoints"), undefined, signal),
  };
}
