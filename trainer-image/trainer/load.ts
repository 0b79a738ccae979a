import type { Logger } from "../../shared/log.ts";
import { Trajectory } from "../../shared/protocol/messages.ts";
import type { ObjectStore, Queue } from "../../shared/transport/types.ts";
import type { BufferedGroup, BufferedTrajectory } from "./buffer.ts";

/**
 * Loading the trajectories behind buffered TrajectoryReady events (claim-check) without letting
 * one bad message take the trainer down. A trajectory that cannot be read (store error, invalid
 * key, missing object, not a Trajectory, another id) fails its message with the reason instead of
 * throwing: the member leaves its group (the rest of the group trains), and every redelivery of
 * that message is failed again at once, so it reaches the dead-letter queue with its reason
 * after maxReceiveCount deliveries while the trainer goes on.
 */

export type LoadOutcome =
  | { readonly ok: true; readonly trajectory: Trajectory }
  | { readonly ok: false; readonly reason: string };

/** Reads and validates one trajectory; never throws. */
export async function loadTrajectory(store: ObjectStore, member: BufferedTrajectory): Promise<LoadOutcome> {
  const { key, trajectoryId } = member.ready;
  let text: string | undefined;
  try {
    text = await store.getText(key);
  } catch (error) {
    return {
      ok: false,
      reason: `cannot read trajectory ${key}: ${error instanceof Error ? error.message : String(error)}`,
    };
  }
  if (text === undefined) return { ok: false, reason: `trajectory ${key} does not exist` };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, reason: `trajectory ${key} is not JSON` };
  }
  const parsed = Trajectory.safeParse(value);
  if (!parsed.success) {
    const first = parsed.error.issues[0];
    return {
      ok: false,
      reason: `trajectory ${key} is invalid: ${first?.path.join(".") || "(root)"}: ${first?.message}`,
    };
  }
  if (parsed.data.trajectoryId !== trajectoryId)
    return { ok: false, reason: `trajectory ${key} holds ${parsed.data.trajectoryId}, not ${trajectoryId}` };
  return { ok: true, trajectory: parsed.data };
}

/** Messages whose trajectory failed to load, by trajectory id, with the reason. */
export class PoisonedTrajectories {
  private readonly reasons = new Map<string, string>();

  constructor(
    private readonly inbox: Queue,
    private readonly log: Logger,
  ) {}

  /** Fails a redelivery of a message already known as poisoned; returns whether it did. */
  async refail(trajectoryId: string, receiptHandle: string): Promise<boolean> {
    const reason = this.reasons.get(trajectoryId);
    if (reason === undefined) return false;
    await this.inbox.fail(receiptHandle, reason).catch((error: unknown) => {
      this.log.warn({ err: error, trajectoryId }, "failing a poisoned redelivery failed");
    });
    return true;
  }

  /**
   * Loads every member of `groups`; a member that fails is failed with its reason and removed from
   * its group (so it is neither trained nor acknowledged).
   */
  async loadGroups(
    store: ObjectStore,
    groups: readonly BufferedGroup[],
  ): Promise<{ trajectories: Trajectory[]; missing: number }> {
    const trajectories: Trajectory[] = [];
    let missing = 0;
    // A fixed order (group, then member), not arrival order: the step's sums, and so its weights,
    // then depend only on which trajectories it trains on.
    const byId = <T>(a: [string, T], b: [string, T]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    for (const group of [...groups].sort((a, b) => byId([a.groupId, a], [b.groupId, b])))
      for (const [trajectoryId, member] of [...group.members].sort(byId)) {
        const loaded = await loadTrajectory(store, member);
        if (loaded.ok) {
          trajectories.push(loaded.trajectory);
          continue;
        }
        missing += 1;
        group.members.delete(trajectoryId);
        this.reasons.set(trajectoryId, loaded.reason);
        this.log.warn(
          { trajectoryId, reason: loaded.reason },
          "trajectory failed to load; its message fails to the DLQ",
        );
        await this.refail(trajectoryId, member.receiptHandle);
      }
    return { trajectories, missing };
  }
}
