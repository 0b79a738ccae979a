/** The feeder role: task mix -> RolloutRequests with backpressure (async) or one batch per version (sync). */
import type { Logger } from "../../shared/log.ts";
import { PolicyPublished } from "../../shared/protocol/messages.ts";
import type { Queue } from "../../shared/transport/types.ts";
import type { FeederOptions } from "./feeder.ts";

export * from "./feeder.ts";
export * from "./plan.ts";

/**
 * The feeder's version source: the PolicyPublished events of the `policy-events` queue (the
 * feeder is their one reader; see shared/config/roleAccess.ts). `latestVersion` receives what is
 * waiting and returns the newest version announced so far (-1 before any); a notice is deleted
 * only once `settleVersions` reaches its version, so a feeder that crashes before feeding a
 * version sees that notice again after the queue's visibility timeout. Events of another
 * experiment or that do not parse are dead-lettered with the reason.
 * @example runFeeder(config, transport, { ...versionsFromEvents(transport.queue("policy-events"), config.experimentId) })
 */
export function versionsFromEvents(
  events: Queue,
  experimentId: string,
  log?: Logger,
): Required<Pick<FeederOptions, "latestVersion" | "settleVersions">> {
  let newest = -1;
  const pending: Array<{ receiptHandle: string; version: number }> = [];
  return {
    async latestVersion() {
      for (const message of await events.receive({ maxMessages: 10 })) {
        let event: PolicyPublished;
        try {
          event = PolicyPublished.parse(JSON.parse(message.body));
        } catch (error) {
          await events.fail(message.receiptHandle, `not a PolicyPublished event: ${(error as Error).message}`);
          continue;
        }
        if (event.experimentId !== experimentId) {
          const reason = `PolicyPublished of experiment "${event.experimentId}", this feeder's is "${experimentId}"`;
          log?.warn({ messageId: message.id }, reason);
          await events.fail(message.receiptHandle, reason);
          continue;
        }
        newest = Math.max(newest, event.version);
        pending.push({ receiptHandle: message.receiptHandle, version: event.version });
      }
      return newest;
    },
    async settleVersions(version) {
      for (let i = pending.length - 1; i >= 0; i--) {
        const notice = pending[i]!;
        if (notice.version > version) continue;
        await events.delete(notice.receiptHandle);
        pending.splice(i, 1);
      }
    },
  };
}
