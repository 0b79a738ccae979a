/** The feeder role: task mix -> RolloutRequests with backpressure (async) or one batch per version (sync). */
import { newestVersion } from "../../shared/protocol/checkpoints.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";

export * from "./feeder.ts";
export * from "./plan.ts";

/**
 * Version source for sync mode: the newest complete version in the checkpoint store, -1 when none.
 * @example runFeeder(config, transport, { latestVersion: latestVersionFrom(transport.store("checkpoints")) })
 */
export function latestVersionFrom(checkpoints: ObjectStore): () => Promise<number> {
  return async () => (await newestVersion(checkpoints)) ?? -1;
}
