/**
 * The rehearsal's failure paths: one poison message per queue a rehearsed role consumes, sent by
 * the admin before the roles start. Each consumer must fail it with a reason (handing it back with
 * ChangeMessageVisibility until its last delivery, then sending it to the queue's dead-letter
 * queue) and go on, so the run still finishes. That makes the dead-letter and visibility grants of
 * every consumer needed by a request of the run, instead of accepted unused.
 */
import type { DeadLetter, QueueName } from "../../shared/transport/types.ts";

/** A message its consumer must refuse, and what the reason it dead-letters with must say. */
export interface PoisonMessage {
  readonly body: string;
  /** The reason `fail` gives, as read back from the dead-letter queue. */
  readonly reason: RegExp;
  /** What makes it poison, for the logs. */
  readonly what: string;
}

/** One poison message per queue, for the experiment `experimentId` (the consumer's own, so only the content is wrong). */
export function poisonMessages(experimentId: string): Readonly<Record<QueueName, PoisonMessage>> {
  return {
    // A claim check that points outside the store: the trainer must never read it.
    trajectories: {
      what: "a TrajectoryReady whose key is ../../etc/passwd",
      body: JSON.stringify({
        schemaVersion: 1,
        trajectoryId: "poison-0",
        experimentId,
        groupId: "poison",
        groupSize: 2,
        task: "db",
        key: "../../etc/passwd",
        tokens: 1,
        reward: 0,
        status: "completed",
        minVersion: 0,
        maxVersion: 0,
      }),
      reason: /TrajectoryReady.*key/,
    },
    // A request without its instance, group and sample: no episode can be run for it.
    "rollout-requests": {
      what: "a RolloutRequest without index, groupId, sample and groupSize",
      body: JSON.stringify({ schemaVersion: 1, experimentId, task: "db" }),
      reason: /invalid RolloutRequest: .*index/,
    },
    // Not an event of the trainer's: no version to feed.
    "policy-events": {
      what: "a PolicyPublished without key, step and createdAt and with version -1",
      body: JSON.stringify({ schemaVersion: 1, experimentId, version: -1 }),
      reason: /not a PolicyPublished event/,
    },
  };
}

/**
 * What is wrong with a queue's dead letters after the run, or undefined when the poison message
 * is there with a matching reason after `maxReceiveCount` deliveries and nothing else is: any
 * other dead letter is a real message the pipeline failed.
 */
export function deadLetterProblem(
  queue: QueueName,
  poison: PoisonMessage,
  letters: readonly DeadLetter[],
  maxReceiveCount: number,
): string | undefined {
  const found = letters.find((letter) => letter.body === poison.body);
  if (!found) return `${queue}: ${poison.what} did not reach its dead-letter queue`;
  if (!poison.reason.test(found.reason))
    return `${queue}: ${poison.what} was dead-lettered with reason "${found.reason}", expected ${poison.reason}`;
  if (found.receiveCount !== maxReceiveCount)
    return `${queue}: ${poison.what} was dead-lettered after ${found.receiveCount} deliveries, expected ${maxReceiveCount}`;
  const others = letters.filter((letter) => letter !== found);
  if (others.length > 0)
    return `${queue}: ${others.length} other message(s) dead-lettered, first: "${others[0]?.reason}" ${others[0]?.body.slice(0, 200)}`;
  return undefined;
}
