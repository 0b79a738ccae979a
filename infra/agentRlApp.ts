import { type App, Duration, type Environment } from "aws-cdk-lib";
import type { ExperimentConfig } from "../shared/config/index.ts";
import type { SweepSpec } from "../shared/config/sweep.ts";
import type { MessagingProps } from "./constructs/messaging.ts";
import { ComputeStack } from "./stacks/computeStack.ts";
import { MessagingStack } from "./stacks/messagingStack.ts";
import { StoresStack } from "./stacks/storesStack.ts";
import { SweepStack } from "./stacks/sweepStack.ts";

/** What `buildAgentRlApp` deploys. */
export interface AgentRlAppOptions {
  /** The experiment the services run; its transport section names the queues. */
  readonly config: ExperimentConfig;
  /** Build context of the images (the repository root). */
  readonly repositoryRoot: string;
  /** @default - "g5.xlarge" as the default of the GpuInstanceType parameter */
  readonly gpuInstanceType?: string;
  /** @default - no sweep stack */
  readonly sweeps?: readonly SweepSpec[];
  /** @default - environment-agnostic stacks (account/region from the CLI profile at deploy) */
  readonly env?: Environment;
  /** @default - 1 */
  readonly natGateways?: number;
}

/** The stacks of one deployment. */
export interface AgentRlStacks {
  readonly stores: StoresStack;
  readonly messaging: MessagingStack;
  readonly compute: ComputeStack;
  readonly sweeps: SweepStack | undefined;
}

/** How long consumers hold messages, derived from the experiment config (see MessagingProps). */
export function messagingPropsFor(config: ExperimentConfig): MessagingProps {
  // Rollout workers and the trainer receive with the queue's own visibility timeout and must
  // finish (or extend) within it, so that timeout is their consumer timeout.
  const held = Duration.seconds(config.transport.visibilityTimeoutSeconds);
  return {
    queuePrefix: config.transport.queuePrefix,
    maxReceiveCount: config.transport.maxReceiveCount,
    rolloutRequests: { consumerTimeout: held, visibilityTimeout: held },
    trajectories: { consumerTimeout: held, visibilityTimeout: held },
    // Policy servers only read the event and reload from the checkpoint store.
    policyEvents: { consumerTimeout: Duration.seconds(30) },
  };
}

/**
 * Adds the agentrl stacks to `app`: AgentRlStores (stateful), AgentRlMessaging, AgentRlCompute
 * and, when sweeps are given, AgentRlSweeps. Stack ids are stable; renaming one replaces it.
 */
export function buildAgentRlApp(app: App, options: AgentRlAppOptions): AgentRlStacks {
  const env = options.env ? { env: options.env } : {};
  const stores = new StoresStack(app, "AgentRlStores", {
    ...env,
    description: "agentrl-ts: trajectory and checkpoint buckets (retained on delete)",
  });
  const messaging = new MessagingStack(app, "AgentRlMessaging", {
    ...env,
    description: "agentrl-ts: rollout-requests, trajectories and policy-events queues with DLQs",
    messaging: messagingPropsFor(options.config),
  });
  const compute = new ComputeStack(app, "AgentRlCompute", {
    ...env,
    description: "agentrl-ts: VPC, ECS cluster, GPU capacity and the pipeline's services",
    config: options.config,
    repositoryRoot: options.repositoryRoot,
    trajectoryBucket: stores.trajectoryBucket,
    checkpointBucket: stores.checkpointBucket,
    queues: messaging.messaging,
    ...(options.gpuInstanceType ? { gpuInstanceType: options.gpuInstanceType } : {}),
    ...(options.natGateways !== undefined ? { natGateways: options.natGateways } : {}),
  });
  const sweeps =
    options.sweeps && options.sweeps.length > 0
      ? new SweepStack(app, "AgentRlSweeps", {
          ...env,
          description: "agentrl-ts: scheduled sweeps (EventBridge Scheduler -> ECS RunTask)",
          cluster: compute.cluster.cluster,
          vpc: compute.cluster.vpc,
          // every grid point runs the embedded pipeline, trainer included: the model image, on CPU
          image: compute.images.trainerCpu,
          resultsBucket: stores.checkpointBucket,
          sweeps: options.sweeps,
        })
      : undefined;
  return { stores, messaging, compute, sweeps };
}
