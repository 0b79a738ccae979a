import { Duration, Stack } from "aws-cdk-lib";
import * as ecs from "aws-cdk-lib/aws-ecs";
import { describe, expect, it } from "vitest";
import { AgentCluster } from "../../infra/constructs/cluster.ts";
import { Messaging, type MessagingProps } from "../../infra/constructs/messaging.ts";
import { RoleService } from "../../infra/constructs/roleService.ts";
import { Stores } from "../../infra/constructs/stores.ts";
import { testApp } from "./synth.ts";

const timing = { consumerTimeout: Duration.minutes(5) };
const messagingProps: MessagingProps = {
  queuePrefix: "exp",
  rolloutRequests: timing,
  trajectories: timing,
  policyEvents: timing,
};

describe("construct props are validated at synth with the given value and the allowed range", () => {
  it("Messaging", () => {
    const stack = () => new Stack(testApp(), "S");
    expect(() => new Messaging(stack(), "M", { ...messagingProps, maxReceiveCount: 0 })).toThrow(
      "Messaging: maxReceiveCount must be within 1..1000, got 0",
    );
    expect(() => new Messaging(stack(), "M", { ...messagingProps, queuePrefix: "has space" })).toThrow(
      /queuePrefix must be 1-40 letters.*got "has space"/,
    );
    expect(
      () =>
        new Messaging(stack(), "M", {
          ...messagingProps,
          trajectories: { consumerTimeout: Duration.minutes(10), visibilityTimeout: Duration.minutes(5) },
        }),
    ).toThrow(
      "Messaging(exp-trajectories): visibilityTimeout must be at least the consumer's timeout (600 s) and at most 43200 s, got 300 s",
    );
    expect(
      () =>
        new Messaging(stack(), "M", { ...messagingProps, rolloutRequests: { consumerTimeout: Duration.hours(13) } }),
    ).toThrow("Messaging(exp-rollout-requests): consumerTimeout must be within 1..43200 s, got 46800 s");
  });

  it("Stores and AgentCluster", () => {
    expect(() => new Stores(new Stack(testApp(), "S"), "St", { trajectoryRetention: Duration.hours(1) })).toThrow(
      /trajectoryRetention must be within 86400\.\.315360000 s, got 3600 s/,
    );
    expect(() => new AgentCluster(new Stack(testApp(), "S"), "C", { gpuInstanceType: "big-gpu" })).toThrow(
      'AgentCluster: gpuInstanceType must be an EC2 instance type like g5.xlarge, got "big-gpu"',
    );
    expect(
      () => new AgentCluster(new Stack(testApp(), "S"), "C", { gpuInstanceType: "g5.xlarge", gpuMaxInstances: 0 }),
    ).toThrow("AgentCluster: gpuMaxInstances must be within 1..100, got 0");
  });

  it("RoleService", () => {
    const stack = new Stack(testApp(), "S");
    const cluster = new AgentCluster(stack, "C", { gpuInstanceType: "g5.xlarge" });
    const image = ecs.ContainerImage.fromRegistry("public.ecr.aws/docker/library/node:20");
    const environment = {
      AGENTRL_ROLE: "feeder",
      AGENTRL_QUEUE_PREFIX: "exp",
      AGENTRL_TRAJECTORY_BUCKET: "t",
      AGENTRL_CHECKPOINT_BUCKET: "c",
    } as const;
    expect(
      () => new RoleService(stack, "A", { cluster, image, environment, placement: { kind: "fargate", cpu: 300 } }),
    ).toThrow(/RoleService\(A\): Fargate cpu must be one of 256, 512, .*got 300/);
    expect(
      () =>
        new RoleService(stack, "B", {
          cluster,
          image,
          environment,
          placement: { kind: "fargate", cpu: 256, memoryMiB: 4096 },
        }),
    ).toThrow("RoleService(B): memoryMiB for cpu 256 must be within 512..2048, got 4096");
    expect(
      () =>
        new RoleService(stack, "D", {
          cluster,
          image,
          environment,
          placement: { kind: "fargate" },
          singleton: true,
          desiredCount: 2,
        }),
    ).toThrow("RoleService(D): a singleton runs at most 1 task, got desiredCount 2");
  });
});

describe("Messaging timing", () => {
  it("derives a visibility timeout from the consumer's timeout with a minute of slack", () => {
    const messaging = new Messaging(new Stack(testApp(), "S"), "M", {
      ...messagingProps,
      rolloutRequests: { consumerTimeout: Duration.minutes(15) },
      trajectories: { consumerTimeout: Duration.hours(12) },
      maxReceiveCount: 7,
    });
    expect(messaging.rolloutRequests.visibilityTimeout.toSeconds()).toBe(960);
    // Capped at the SQS maximum rather than rejected.
    expect(messaging.trajectories.visibilityTimeout.toSeconds()).toBe(43_200);
    expect(messaging.maxReceiveCount).toBe(7);
  });
});
