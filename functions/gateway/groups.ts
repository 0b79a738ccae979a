import type { Session } from "./session.ts";

/**
 * GRPO groups of gateway sessions. A session created with `groupId`/`groupSize` joins that group,
 * which is released (exported to the trainer as one group) once `groupSize` sessions have joined
 * and each has ended or been abandoned, or when `gateway.groupTimeoutSeconds` has passed since
 * the group's first session: then open members are abandoned and missing ones count as dropped.
 *
 * A session without a group is trained against the task's recent sessions: ended ungrouped
 * sessions of one task collect in a bucket and every `gateway.baselineGroupSize` of them form a
 * group, so each one's advantage is its reward minus the mean of those sessions (GRPO's group
 * baseline, over a sliding window of the task's sessions instead of samples of one instance). A
 * bucket that does not fill within the group timeout is released as it is.
 */

/** Released group ids kept to refuse a late session of the same group (a bounded memory). */
const MAX_REMEMBERED_RELEASES = 100_000;

/** A group ready for export. */
export interface GroupRelease {
  readonly groupId: string;
  readonly members: readonly Session[];
  /** Members that never joined (explicit groups released by timeout). */
  readonly missing: number;
}

interface OpenGroup {
  readonly groupId: string;
  readonly size: number;
  readonly members: Session[];
  readonly openedAt: number;
  /** Ungrouped sessions collected by task, or an explicit group. */
  readonly bucket: boolean;
}

export class GroupBook {
  private readonly groups = new Map<string, OpenGroup>();
  /** Group ids already released: a late session cannot join one. */
  private readonly released = new Set<string>();
  private readonly buckets = new Map<string, OpenGroup>();
  private bucketSeq = 0;

  constructor(
    private readonly options: {
      readonly baselineGroupSize: number;
      readonly groupTimeoutMs: number;
      /** Distinguishes this gateway's bucket group ids from another instance's. */
      readonly instanceId: string;
    },
  ) {}

  /** Why `session` cannot join its group, or undefined when it joined (or has none). */
  join(session: Session, now: number): string | undefined {
    const { groupId, groupSize } = session;
    if (groupId === undefined || groupSize === undefined) return undefined;
    if (this.released.has(groupId)) return `group ${groupId} was released already; use a new groupId`;
    let group = this.groups.get(groupId);
    if (!group) {
      group = { groupId, size: groupSize, members: [], openedAt: now, bucket: false };
      this.groups.set(groupId, group);
    }
    if (group.size !== groupSize) return `group ${groupId} has groupSize ${group.size}, not ${groupSize}`;
    if (group.members.length >= group.size) return `group ${groupId} has all its ${group.size} sessions`;
    group.members.push(session);
    return undefined;
  }

  /** Called when `session` has ended or been abandoned: the groups that are now complete. */
  finished(session: Session, now: number): GroupRelease[] {
    if (session.groupId !== undefined) {
      const group = this.groups.get(session.groupId);
      return group && complete(group) ? [this.release(group, 0)] : [];
    }
    if (session.state !== "ended") return []; // an abandoned ungrouped session is counted, never trained
    let bucket = this.buckets.get(session.task);
    if (!bucket) {
      bucket = {
        groupId: `gw-${session.task}-${this.options.instanceId}-b${this.bucketSeq++}`,
        size: this.options.baselineGroupSize,
        members: [],
        openedAt: now,
        bucket: true,
      };
      this.buckets.set(session.task, bucket);
    }
    bucket.members.push(session);
    if (bucket.members.length < bucket.size) return [];
    this.buckets.delete(session.task);
    return [this.release(bucket, 0)];
  }

  /**
   * Groups past the timeout, released as they are. `abandon` is called for each member still
   * open first (it must set the session's state to abandoned).
   */
  due(now: number, abandon: (session: Session) => void): GroupRelease[] {
    const out: GroupRelease[] = [];
    for (const group of [...this.groups.values()]) {
      if (now - group.openedAt < this.options.groupTimeoutMs) continue;
      for (const member of group.members) if (member.state === "open") abandon(member);
      out.push(this.release(group, group.size - group.members.length));
    }
    for (const [task, bucket] of [...this.buckets]) {
      if (now - bucket.openedAt < this.options.groupTimeoutMs) continue;
      this.buckets.delete(task);
      out.push(this.release(bucket, 0));
    }
    return out;
  }

  /** Sessions ended but not yet released (they still count against the staleness bound). */
  get waiting(): number {
    let n = 0;
    for (const group of [...this.groups.values(), ...this.buckets.values()])
      n += group.members.filter((m) => m.state !== "open").length;
    return n;
  }

  private release(group: OpenGroup, missing: number): GroupRelease {
    if (!group.bucket) {
      this.groups.delete(group.groupId);
      this.released.add(group.groupId);
      // remembered for refusing late joiners, not forever: the oldest ids go first
      if (this.released.size > MAX_REMEMBERED_RELEASES)
        this.released.delete(this.released.values().next().value as string);
    }
    return { groupId: group.groupId, members: [...group.members], missing };
  }
}

function complete(group: OpenGroup): boolean {
  return group.members.length >= group.size && group.members.every((m) => m.state !== "open");
}
