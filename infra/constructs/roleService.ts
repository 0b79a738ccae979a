import { Duration, RemovalPolicy } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecs from "aws-cdk-lib/aws-ecs";
import type * as iam from "aws-cdk-lib/aws-iam";
import * as logs from "aws-cdk-lib/aws-logs";
import type * as sqs from "aws-cdk-lib/aws-sqs";
import { NagSuppressions } from "cdk-nag";
import { Construct } from "constructs";
import type { ContainerEnvInput } from "../../shared/config/containerEnv.ts";
import type { AgentCluster } from "./cluster.ts";
import { InvalidPropError, requireRange } from "./validate.ts";

/** Fargate: CPU-only roles. CPU units and memory must be a Fargate combination. */
export interface FargatePlacement {
  readonly kind: "fargate";
  /** @default - 1024 (1 vCPU) */
  readonly cpu?: number;
  /** @default - 2048 */
  readonly memoryMiB?: number;
}

/** The cluster's GPU EC2 capacity: trainer and policy servers. */
export interface GpuPlacement {
  readonly kind: "gpu";
  /** GPUs reserved for the container. @default - 1 */
  readonly gpuCount?: number;
  /** CPU units reserved (1024 = 1 vCPU). @default - 2048 */
  readonly cpu?: number;
  /** Memory reserved; must fit the instance type next to the ECS agent. @default - 12288 */
  readonly memoryMiB?: number;
}

/**
 * A CPU EC2 capacity provider of the cluster (the OS tasks' sandbox hosts): awsvpc tasks whose
 * container may mount host paths. Pool-launched only.
 */
export interface Ec2Placement {
  readonly kind: "ec2";
  readonly capacityProvider: ecs.AsgCapacityProvider;
  /** CPU units reserved (1024 = 1 vCPU). @default - 1024 */
  readonly cpu?: number;
  /** Memory reserved. @default - 2048 */
  readonly memoryMiB?: number;
}

/** Props of {@link RoleService}. */
export interface RoleServiceProps {
  readonly cluster: AgentCluster;
  readonly image: ecs.ContainerImage;
  /** The typed container environment (shared/config/containerEnv.ts); AGENTRL_ROLE picks the role. */
  readonly environment: ContainerEnvInput;
  readonly placement: FargatePlacement | GpuPlacement | Ec2Placement;
  /**
   * Port the role listens on; opened to peers with {@link RoleService.allowFrom}.
   * @default - no port (a pure queue consumer)
   */
  readonly port?: number;
  /**
   * Cloud Map name: the service answers at `<name>.<namespace>`.
   * @default - not registered in service discovery
   */
  readonly discoveryName?: string;
  /**
   * Secrets injected by ECS from Secrets Manager at task start (AGENTRL_ENV_SECRET, ...): the task
   * definition holds only the secret's ARN, never its value.
   * @default - none
   */
  readonly secrets?: Readonly<Record<string, ecs.Secret>>;
  /** @default - 1 */
  readonly desiredCount?: number;
  /**
   * Exactly one task at a time (trainer, feeder): deployments stop the old task before starting
   * the new one, so two copies never consume the same queue with diverging state.
   * @default - false
   */
  readonly singleton?: boolean;
  /**
   * Who runs the tasks: an ECS service, or an env pool manager (functions/envpool/) that calls
   * RunTask on this task definition itself (no service is created; Fargate or EC2 placement).
   * @default - "service"
   */
  readonly launchedBy?: "service" | "pool";
}

/** Docker labels naming a task's Prometheus port and path, as ECS-aware scrapers read them. */
export const METRICS_PORT_LABEL = "ECS_PROMETHEUS_EXPORTER_PORT";
export const METRICS_PATH_LABEL = "ECS_PROMETHEUS_METRICS_PATH";

/** The command every role's container runs: `agentrl container` (cli/commands/container.ts). */
export const CONTAINER_COMMAND: readonly string[] = ["node", "bin/agentrl.mjs", "container"];

// Fargate CPU units -> allowed memory (MiB), from the ECS task-size table.
const FARGATE_MEMORY: Readonly<Record<number, readonly [number, number]>> = {
  256: [512, 2048],
  512: [1024, 4096],
  1024: [2048, 8192],
  2048: [4096, 16_384],
  4096: [8192, 30_720],
  8192: [16_384, 61_440],
  16384: [32_768, 122_880],
};

/**
 * One ECS service running one role of the pipeline: task definition, log group, container with
 * the typed environment, security group, optional Cloud Map registration. Permissions are
 * granted by the caller with the resources' grantXxx(service.taskRole).
 */
export class RoleService extends Construct {
  /** Undefined when the tasks are launched by an env pool. */
  readonly service: ecs.BaseService | undefined;
  readonly taskDefinition: ecs.TaskDefinition;
  readonly container: ecs.ContainerDefinition;
  readonly securityGroup: ec2.SecurityGroup;
  /** The task's log group (its sidecars log here too). */
  readonly logGroup: logs.LogGroup;
  readonly port: number | undefined;
  /** The role this service runs (its AGENTRL_ROLE). */
  readonly role: ContainerEnvInput["AGENTRL_ROLE"];

  constructor(scope: Construct, id: string, props: RoleServiceProps) {
    super(scope, id);
    const role = props.environment.AGENTRL_ROLE;
    this.role = role;
    const desiredCount = props.desiredCount ?? 1;
    requireRange(`RoleService(${id})`, "desiredCount", desiredCount, 0, 1000);
    if (props.port !== undefined) requireRange(`RoleService(${id})`, "port", props.port, 1, 65_535);
    if (props.singleton && desiredCount > 1)
      throw new InvalidPropError(
        `RoleService(${id}): a singleton runs at most 1 task, got desiredCount ${desiredCount}`,
      );
    this.port = props.port;

    const { vpc, cluster, namespace, gpuCapacityProvider } = props.cluster;
    this.securityGroup = new ec2.SecurityGroup(this, "Tasks", { vpc, description: `agentrl ${role} tasks` });
    const logGroup = new logs.LogGroup(this, "Logs", {
      retention: logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    this.logGroup = logGroup;
    const containerOptions: ecs.ContainerDefinitionOptions = {
      image: props.image,
      // Every image holds the repository; the launcher reads the typed environment and starts the
      // role (env images' own CMD expects flags instead).
      command: [...CONTAINER_COMMAND],
      // Literal strings (or tokens resolved at deploy); the container parses them with zod at start.
      environment: Object.fromEntries(
        Object.entries(props.environment).filter((entry): entry is [string, string] => entry[1] !== undefined),
      ),
      ...(props.secrets ? { secrets: { ...props.secrets } } : {}),
      logging: ecs.LogDrivers.awsLogs({ streamPrefix: role, logGroup }),
      portMappings: props.port === undefined ? [] : [{ containerPort: props.port }],
      stopTimeout: Duration.seconds(60),
    };
    // GPU capacity is sized to the GPU tasks (one GPU each), so a GPU service cannot start a
    // replacement before stopping the old task either.
    const deployment =
      props.singleton || props.placement.kind === "gpu"
        ? { minHealthyPercent: 0, maxHealthyPercent: 100 }
        : { minHealthyPercent: 100, maxHealthyPercent: 200 };
    const cloudMapOptions =
      props.discoveryName === undefined
        ? undefined
        : { name: props.discoveryName, cloudMapNamespace: namespace, dnsTtl: Duration.seconds(10) };

    if (props.placement.kind === "fargate") {
      const cpu = props.placement.cpu ?? 1024;
      const memoryMiB = props.placement.memoryMiB ?? 2048;
      const range = FARGATE_MEMORY[cpu];
      if (!range)
        throw new InvalidPropError(
          `RoleService(${id}): Fargate cpu must be one of ${Object.keys(FARGATE_MEMORY).join(", ")}, got ${cpu}`,
        );
      requireRange(`RoleService(${id})`, `memoryMiB for cpu ${cpu}`, memoryMiB, range[0], range[1]);
      const taskDefinition = new ecs.FargateTaskDefinition(this, "Task", {
        cpu,
        memoryLimitMiB: memoryMiB,
        runtimePlatform: { cpuArchitecture: ecs.CpuArchitecture.X86_64 },
      });
      this.container = taskDefinition.addContainer("Role", containerOptions);
      this.taskDefinition = taskDefinition;
      this.service =
        props.launchedBy === "pool"
          ? undefined
          : new ecs.FargateService(this, "Service", {
              cluster,
              taskDefinition,
              desiredCount,
              securityGroups: [this.securityGroup],
              vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
              circuitBreaker: { rollback: true },
              ...deployment,
              ...(cloudMapOptions ? { cloudMapOptions } : {}),
            });
    } else if (props.placement.kind === "ec2") {
      if (props.launchedBy !== "pool")
        throw new InvalidPropError(`RoleService(${id}): EC2 placement is for pool-launched env workers only`);
      const cpu = props.placement.cpu ?? 1024;
      const memoryMiB = props.placement.memoryMiB ?? 2048;
      requireRange(`RoleService(${id})`, "cpu", cpu, 128, 196_608);
      requireRange(`RoleService(${id})`, "memoryMiB", memoryMiB, 512, 786_432);
      const taskDefinition = new ecs.Ec2TaskDefinition(this, "Task", { networkMode: ecs.NetworkMode.AWS_VPC });
      this.container = taskDefinition.addContainer("Role", {
        ...containerOptions,
        cpu,
        memoryReservationMiB: memoryMiB,
      });
      this.taskDefinition = taskDefinition;
      this.service = undefined;
    } else {
      if (props.launchedBy === "pool")
        throw new InvalidPropError(
          `RoleService(${id}): pool-launched tasks run on Fargate or EC2 sandbox hosts, not on the GPU capacity`,
        );
      const gpuCount = props.placement.gpuCount ?? 1;
      requireRange(`RoleService(${id})`, "gpuCount", gpuCount, 1, 8);
      const taskDefinition = new ecs.Ec2TaskDefinition(this, "Task", { networkMode: ecs.NetworkMode.AWS_VPC });
      this.container = taskDefinition.addContainer("Role", {
        ...containerOptions,
        gpuCount,
        cpu: props.placement.cpu ?? 2048,
        memoryReservationMiB: props.placement.memoryMiB ?? 12_288,
      });
      this.taskDefinition = taskDefinition;
      this.service = new ecs.Ec2Service(this, "Service", {
        cluster,
        taskDefinition,
        desiredCount,
        securityGroups: [this.securityGroup],
        vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
        capacityProviderStrategies: [{ capacityProvider: gpuCapacityProvider.capacityProviderName, weight: 1 }],
        circuitBreaker: { rollback: true },
        ...deployment,
        ...(cloudMapOptions ? { cloudMapOptions } : {}),
      });
    }

    NagSuppressions.addResourceSuppressions(
      this.taskDefinition,
      [
        {
          id: "AwsSolutions-ECS2",
          reason:
            "The environment holds the experiment config and resource names only; the shared secrets come from Secrets Manager (container secrets, ARN only).",
        },
      ],
      true,
    );
    NagSuppressions.addResourceSuppressions(
      this.taskDefinition,
      [
        {
          id: "AwsSolutions-IAM5",
          reason:
            "Execution role: ecr:GetAuthorizationToken is only grantable on '*' (AWS-defined); added by CDK for the image asset pull.",
          appliesTo: ["Resource::*"],
        },
      ],
      true,
    );
  }

  /**
   * Records why the object wildcards of the role-access grants are acceptable. Call after the
   * grants: the role's policy only exists once something was granted.
   */
  acknowledgeGrantWildcards(): void {
    NagSuppressions.addResourceSuppressions(
      this.taskRole,
      [
        {
          id: "AwsSolutions-IAM5",
          reason:
            "Role-access grants (shared/config/roleAccess.ts): s3:GetObject/PutObject on one named bucket's key prefix " +
            "(<bucket>.Arn/<prefix>/*), since object keys under a prefix are made at run time; no grant targets '*'.",
          appliesTo: [{ regex: "/^Resource::<[A-Za-z0-9]+\\.Arn>\\/[a-z]+\\/\\*$/" }],
        },
      ],
      true,
    );
  }

  /** The task role: pass it to grantXxx() of queues and buckets. */
  get taskRole(): iam.IRole {
    return this.taskDefinition.taskRole;
  }

  /**
   * Serves Prometheus /metrics on `port` of its own (AGENTRL_METRICS_PORT on 0.0.0.0) behind the
   * scrape token, reachable from `scrapers` (the VPC's CIDR) on that port only: the role's API
   * port stays open to its callers alone.
   */
  exposeMetrics(port: number, token: ecs.Secret, scrapers: ec2.IPeer): void {
    requireRange(`RoleService(${this.node.id})`, "metrics port", port, 1, 65_535);
    if (port === this.port)
      throw new InvalidPropError(`RoleService(${this.node.id}): the metrics port ${port} is the role's own port`);
    this.container.addEnvironment("AGENTRL_METRICS_PORT", String(port));
    this.container.addEnvironment("AGENTRL_METRICS_HOST", "0.0.0.0");
    this.container.addSecret("AGENTRL_METRICS_TOKEN", token);
    this.container.addPortMappings({ containerPort: port });
    // Where ECS-aware scrapers (the OpenTelemetry collector's ecs_observer, CloudWatch's agent) look.
    this.container.addDockerLabel(METRICS_PORT_LABEL, String(port));
    this.container.addDockerLabel(METRICS_PATH_LABEL, "/metrics");
    this.securityGroup.addIngressRule(scrapers, ec2.Port.tcp(port), "Prometheus scrapes /metrics from inside the VPC");
    NagSuppressions.addResourceSuppressions(this.securityGroup, [
      {
        id: "AwsSolutions-EC23",
        reason:
          "The metrics port's ingress is the VPC's own CIDR (a deploy-time token cdk-nag cannot resolve), never 0.0.0.0/0; every scrape needs AGENTRL_METRICS_TOKEN.",
      },
    ]);
  }

  /** Lets `peer` reach this role's port (no-op for roles without a port). */
  allowFrom(peer: RoleService): void {
    if (this.port === undefined) return;
    this.securityGroup.connections.allowFrom(peer.securityGroup, ec2.Port.tcp(this.port), `from ${peer.node.id}`);
  }

  /**
   * Step scaling on the depth of `queue` (visible messages): between `min` and `max` tasks, one
   * more task per `messagesPerTask` waiting messages.
   */
  scaleOnQueueDepth(queue: sqs.IQueue, options: { min: number; max: number; messagesPerTask: number }): void {
    requireRange(`RoleService(${this.node.id})`, "scaling min", options.min, 0, 1000);
    requireRange(`RoleService(${this.node.id})`, "scaling max", options.max, Math.max(1, options.min), 1000);
    requireRange(`RoleService(${this.node.id})`, "messagesPerTask", options.messagesPerTask, 1, 100_000);
    if (!this.service)
      throw new InvalidPropError(`RoleService(${this.node.id}): pool-launched tasks are scaled by their pool`);
    const scaling = this.service.autoScaleTaskCount({ minCapacity: options.min, maxCapacity: options.max });
    const per = options.messagesPerTask;
    scaling.scaleOnMetric("QueueDepth", {
      metric: queue.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1) }),
      scalingSteps: [
        { upper: 0, change: -1 },
        { lower: per, change: +1 },
        { lower: per * 4, change: +3 },
      ],
      cooldown: Duration.minutes(2),
    });
  }
}
