import type { MemberDropped, TrajectoryReady } from "../../shared/protocol/messages.ts";

/** One buffered TrajectoryReady and the receipt of its newest delivery. */
export interface BufferedTrajectory {
  readonly ready: TrajectoryReady;
  receiptHandle: string;
  /** Receipts of older deliveries of the same trajectory (redeliveries); deleted with it. */
  readonly olderReceipts: string[];
}

/** One buffered MemberDropped (a member with no trajectory) and the receipt of its newest delivery. */
export interface BufferedDrop {
  readonly dropped: MemberDropped;
  receiptHandle: string;
  readonly olderReceipts: string[];
}

/** The members of one GRPO group received so far. */
export interface BufferedGroup {
  readonly groupId: string;
  readonly groupSize: number;
  /** First arrival, ms since epoch (group timeout and oldest-first order). */
  readonly firstSeen: number;
  readonly members: Map<string, BufferedTrajectory>;
  /** Members announced as dropped (environment or infrastructure failures): the group is short by these. */
  readonly dropped: Map<string, BufferedDrop>;
}

/**
 * Group-aware buffer (reference section 1.1): a group becomes trainable when each of its `n`
 * members has arrived, either as a trajectory or as dropped (every attempt failed outside the
 * agent's control; the group then trains without it). A redelivery (same trajectoryId) does not
 * add a member; its receipt replaces the old one (both are deleted when the group is acknowledged).
 */
export class GroupBuffer {
  private readonly groups = new Map<string, BufferedGroup>();

  private groupOf(groupId: string, groupSize: number, now: number): BufferedGroup {
    let group = this.groups.get(groupId);
    if (!group) {
      group = { groupId, groupSize, firstSeen: now, members: new Map(), dropped: new Map() };
      this.groups.set(groupId, group);
    }
    return group;
  }

  /** Adds one delivery; returns whether it was a new member or a redelivery of a buffered one. */
  add(ready: TrajectoryReady, receiptHandle: string, now = Date.now()): "added" | "redelivered" {
    const group = this.groupOf(ready.groupId, ready.groupSize, now);
    if (redelivered(group, ready.trajectoryId, receiptHandle)) return "redelivered";
    group.members.set(ready.trajectoryId, { ready, receiptHandle, olderReceipts: [] });
    return "added";
  }

  /** Records a member that has no trajectory; a member already present (either way) is a redelivery. */
  drop(dropped: MemberDropped, receiptHandle: string, now = Date.now()): "added" | "redelivered" {
    const group = this.groupOf(dropped.groupId, dropped.groupSize, now);
    if (redelivered(group, dropped.trajectoryId, receiptHandle)) return "redelivered";
    group.dropped.set(dropped.trajectoryId, { dropped, receiptHandle, olderReceipts: [] });
    return "added";
  }

  /** Complete groups, oldest first. */
  completeGroups(): BufferedGroup[] {
    return [...this.groups.values()].filter((g) => arrived(g) >= g.groupSize).sort((a, b) => a.firstSeen - b.firstSeen);
  }

  /** Incomplete groups whose first member arrived more than `timeoutMs` ago. */
  expiredGroups(now: number, timeoutMs: number): BufferedGroup[] {
    return [...this.groups.values()].filter((g) => arrived(g) < g.groupSize && now - g.firstSeen > timeoutMs);
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
    return [...this.groups.values()].flatMap((g) => entriesOf(g).map((m) => m.receiptHandle));
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

/** Members arrived so far, with a trajectory or as dropped. */
function arrived(group: BufferedGroup): number {
  return group.members.size + group.dropped.size;
}

/** Every buffered delivery of a group: trajectories and drops. */
export function entriesOf(group: BufferedGroup): Array<BufferedTrajectory | BufferedDrop> {
  return [...group.members.values(), ...group.dropped.values()];
}

/** A member already buffered (either way) takes the new receipt and keeps the old one for deletion. */
function redelivered(group: BufferedGroup, trajectoryId: string, receiptHandle: string): boolean {
  const existing = group.members.get(trajectoryId) ?? group.dropped.get(trajectoryId);
  if (!existing) return false;
  existing.olderReceipts.push(existing.receiptHandle);
  existing.receiptHandle = receiptHandle;
  return true;
}
