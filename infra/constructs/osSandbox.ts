import * as ecs from "aws-cdk-lib/aws-ecs";
import type { AgentBenchOsImage } from "../../shared/agentbench/osImages.ts";
import type { RoleService } from "./roleService.ts";

/**
 * AgentBench's OS tasks run every episode in a container of its own (env-images/osbench/sandbox.ts
 * drives podman or Docker through their CLI). On ECS the worker task runs on a sandbox host
 * (sandboxHosts.ts) and mounts that host's Docker socket: its episodes are sibling containers on
 * the host's daemon, with the sandbox's limits (1 GiB memory and no swap, 2 CPUs, 512 processes,
 * a 1 GiB disk cap, `--network none`) enforced by the host's kernel. The episode images are
 * pulled onto the host with the worker's own task: each is a non-essential container of the task
 * that exits at once, so ECS pulls it with the task's execution role, and the worker starts its
 * episodes from the image already there. The trust model (who can reach the daemon, what a
 * hostile script can touch) is in docs/security.md.
 */

/** The host's Docker socket, as the task mounts it. */
export const DOCKER_SOCKET = "/var/run/docker.sock";

/** Tasks whose env workers start a container per episode: AgentBench's OS interaction. */
export function needsContainerRuntime(task: string): boolean {
  return task === "os-std" || task === "os-dev" || task === "os-env_train";
}

/** Memory one episode may use (upstream's 1 GB, the sandbox's hard cap), reserved in the worker task. */
export const EPISODE_MEMORY_MIB = 1024;
/** CPU reserved per episode: the cap is 2 CPUs, but an episode mostly waits on the policy. */
export const EPISODE_CPU_UNITS = 256;

/**
 * The worker task's reservation for `concurrency` episodes: ECS does not see containers started
 * through the socket, so the task reserves their memory (and a share of CPU) itself, and ECS then
 * never places more workers on a host than their episodes fit.
 */
export function sandboxWorkerReservation(concurrency: number): { cpu: number; memoryMiB: number } {
  return { cpu: 1024 + concurrency * EPISODE_CPU_UNITS, memoryMiB: 2048 + concurrency * EPISODE_MEMORY_MIB };
}

/**
 * Mounts the host's Docker socket into the worker, pulls the episode images with the task and
 * names them to the worker (AGENTRL_OS_IMAGE_DEFAULT / _PACKAGES).
 */
export function addHostContainerRuntime(
  worker: RoleService,
  images: Readonly<Record<AgentBenchOsImage, ecs.ContainerImage>>,
): void {
  const task = worker.taskDefinition;
  task.addVolume({ name: "docker-socket", host: { sourcePath: DOCKER_SOCKET } });
  worker.container.addMountPoints({ sourceVolume: "docker-socket", containerPath: DOCKER_SOCKET, readOnly: false });
  worker.container.addEnvironment("AGENTRL_CONTAINER_ENGINE", "docker");
  for (const [subtype, image] of Object.entries(images) as Array<[AgentBenchOsImage, ecs.ContainerImage]>) {
    const carrier = task.addContainer(`OsImage-${subtype}`, {
      image,
      essential: false,
      // Only here to bring the image onto the host; it exits at once.
      entryPoint: ["/bin/true"],
      memoryReservationMiB: 16,
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: `os-image-${subtype}`, logGroup: worker.logGroup }),
    });
    // The worker starts once the image is on the host.
    worker.container.addContainerDependencies({
      container: carrier,
      condition: ecs.ContainerDependencyCondition.SUCCESS,
    });
    worker.container.addEnvironment(`AGENTRL_OS_IMAGE_${subtype.toUpperCase()}`, carrier.imageName);
  }
}
