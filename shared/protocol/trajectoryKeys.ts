import type { Trajectory, TrajectoryReady } from "./messages.ts";

/**
 * How a producer files a trajectory and announces it (claim-check). The rollout worker and the
 * gateway both use these, so the trainer reads every trajectory the same way, whoever made it.
 */

/** Object key of a trajectory in the trajectory store. */
export function trajectoryKey(experimentId: string, groupId: string, trajectoryId: string): string {
  return `trajectories/${experimentId}/${groupId}/${trajectoryId}.json`;
}

/** TrajectoryReady of a stored trajectory: its key, size, reward and the version span of its trained tokens. */
export function readyOf(trajectory: Trajectory, key: string): TrajectoryReady {
  const versions = trajectory.policyVersion.filter((v, i) => trajectory.lossMask[i] === 1 && v >= 0);
  return {
    schemaVersion: 1,
    trajectoryId: trajectory.trajectoryId,
    experimentId: trajectory.experimentId,
    groupId: trajectory.groupId,
    groupSize: trajectory.groupSize,
    task: trajectory.task,
    key,
    tokens: trajectory.tokenIds.length,
    reward: trajectory.reward,
    status: trajectory.status,
    minVersion: versions.length ? Math.min(...versions) : -1,
    maxVersion: versions.length ? Math.max(...versions) : -1,
  };
}
