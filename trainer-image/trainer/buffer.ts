import type { TrajectoryReady } from "../../shared/protocol/messages.ts";

/** One buffered TrajectoryReady and the receipt of its newest delivery. */
export interface BufferedTrajectory {
  readonly ready: TrajectoryReady;
  receiptHandle: string;
  /** Receipts of older deliveries of the same trajectory (redeliveries); deleted with it. */
  readonly olderReceipts: string[];
}

/** The members of one GRPO group received so far. */
export interface BufferedGroup {
  readonly groupId: string;
  readonly groupSize: number;
  /** First arrival, ms since epoch (group timeout and oldest-first order). */
  readonly firstSeen: number;
  readonly members: Map<string, BufferedTrajectory>;
}

/**
 * Group-aware buffer (reference section 1.1): a group becomes trainable only when all `n` of its
 * trajectories have arrived. A redelivered TrajectoryReady (same trajectoryId) does not add a
 * member; its receipt replaces the old one (both are deleted when the group is acknowledged).
 */
export class GroupBuffer {
  private readonly groups = new Map<string, BufferedGroup>();

  /** Adds one delivery; returns whether it was a new member or a redelivery of a buffered one. */
  add(ready: TrajectoryReady, receiptHandle: string, now = Date.now()): "added" | "redelivered" {
    let group = this.groups.get(ready.groupId);
    if (!group) {
      group = { groupId: ready.groupId, groupSize: ready.groupSize, firstSeen: now, members: new Map() };
      this.groups.set(ready.groupId, group);
    }
    const existing = group.members.get(ready.trajectoryId);
    if (existing) {
      existing.olderReceipts.push(existing.receiptHandle);
      existing.receiptHandle = receiptHandle;
      return "redelivered";
    }
    group.members.set(ready.trajectoryId, { ready, receiptHandle, olderReceipts: [] });
    return "added";
  }

  /** Complete groups, oldest first. */
  completeGroups(): BufferedGroup[] {
    return [...this.groups.values()]
      .filter((g) => g.members.size >= g.groupSize)
      .sort((a, b) => a.firstSeen - b.firstSeen);
  }

  /** Incomplete groups whose first member arrived more than `timeoutMs` ago. */
  expiredGroups(now: number, timeoutMs: number): BufferedGroup[] {
    return [...this.groups.values()].filter((g) => g.members.size < g.groupSize && now - g.firstSeen > timeoutMs);
  }

  /** Removes and returns these groups. */
  take(groups: readonly BufferedGroup[]): BufferedGroup[] {
    for (const g of groups) this.groups.delete(g.groupId);
    return [...groups];
  }

  has(trajectoryId: string, groupId: string): boolean {
    return this.groups.get(groupId)?.members.has(trajectoryId) ?? false;
  }

  /** Current receipt of every buffered delivery (to keep them hidden while they wait). */
  receipts(): string[] {
    return [...this.groups.values()].flatMap((g) => [...g.members.values()].map((m) => m.receiptHandle));
  }

  get groupCount(): number {
    return this.groups.size;
  }

  get trajectoryCount(): number {
    let n = 0;
    for (const g of this.groups.values()) n += g.members.size;
    return n;
  }
}

/** Groups a step needs: the batch, or warmupFactor batches before the very first step. */
export function groupsNeeded(batchSize: number, warmupFactor: number, firstStep: boolean): number {
  return firstStep ? Math.ceil(warmupFactor * batchSize) : batchSize;
}
