import { ArnFormat, CfnOutput, CfnParameter, Fn, Stack, type StackProps } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecs from "aws-cdk-lib/aws-ecs";
import * as iam from "aws-cdk-lib/aws-iam";
import type * as s3 from "aws-cdk-lib/aws-s3";
import * as secretsmanager from "aws-cdk-lib/aws-secretsmanager";
import { NagSuppressions } from "cdk-nag";
import type { Construct } from "constructs";
import type { ContainerEnvInputOf } from "../../shared/config/containerEnv.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { accessFeaturesOf, forFeatures, ROLE_ACCESS } from "../../shared/config/roleAccess.ts";
import { AgentCluster } from "../constructs/cluster.ts";
import { RoleImages } from "../constructs/images.ts";
import type { QueueWithDlq } from "../constructs/messaging.ts";
import { addMysqlSidecar, needsMysql } from "../constructs/mysqlSidecar.ts";
import { addHostContainerRuntime, needsContainerRuntime, sandboxWorkerReservation } from "../constructs/osSandbox.ts";
import { type GrantTargets, grantRoleAccess } from "../constructs/roleGrants.ts";
import { RoleService } from "../constructs/roleService.ts";
import { SandboxHosts } from "../constructs/sandboxHosts.ts";
import { requireRange } from "../constructs/validate.ts";

/** The queues compute roles use (from the Messaging construct). */
export interface PipelineQueues {
  readonly rolloutRequests: QueueWithDlq;
  readonly trajectories: QueueWithDlq;
  readonly policyEvents: QueueWithDlq;
}

/** Props of {@link ComputeStack}. */
export interface ComputeStackProps extends StackProps {
  /** The experiment every service runs (validated; passed to containers as AGENTRL_CONFIG_JSON). */
  readonly config: ExperimentConfig;
  /** Build context of every image. */
  readonly repositoryRoot: string;
  readonly trajectoryBucket: s3.IBucket;
  readonly checkpointBucket: s3.IBucket;
  readonly queues: PipelineQueues;
  /**
   * Default of the `GpuInstanceType` stack parameter (override at deploy with
   * `--parameters AgentRlCompute:GpuInstanceType=g5.2xlarge`).
   * @default - "g5.xlarge" (1 NVIDIA A10G, 4 vCPU, 16 GiB)
   */
  readonly gpuInstanceType?: string;
  /**
   * Most rollout worker tasks the queue-depth scaling may run.
   * @default - 4 x config.rollout.workers
   */
  readonly rolloutMaxWorkers?: number;
  /** @default - 1 */
  readonly natGateways?: number;
  /**
   * Default of the `SandboxInstanceType` stack parameter: the CPU hosts of the AgentBench OS tasks'
   * env workers, made only when an os-* task is in the mix.
   * @default - "m6i.2xlarge" (8 vCPU, 32 GiB)
   */
  readonly sandboxInstanceType?: string;
}

/** Port of env workers and policy servers inside their tasks (each task has its own ENI). */
export const ENV_WORKER_PORT = 5021;
export const POLICY_SERVER_PORT = 8000;
/** Port of the gateway when `gateway.port` is 0 (any free port locally). */
export const GATEWAY_PORT = 8080;
/** Port of every role's Prometheus /metrics inside its task (OpenTelemetry's Prometheus exporter's). */
export const METRICS_PORT = 9464;
const NAMESPACE = "agentrl.local";

/**
 * Every role of the pipeline as ECS services: controller (Cloud Map), one env worker service per
 * task of the mix, current and stale policy servers and the trainer on GPU EC2, the feeder, and
 * rollout workers scaling on the rollout-requests queue depth. IAM through grants only.
 */
export class ComputeStack extends Stack {
  readonly cluster: AgentCluster;
  readonly images: RoleImages;
  readonly controller: RoleService;
  /** Env worker task definitions (no service: launched by the task's pool). */
  readonly envWorkers: ReadonlyMap<string, RoleService>;
  /** One env pool manager per task: runs, recycles and scales that task's env worker tasks. */
  readonly envPools: ReadonlyMap<string, RoleService>;
  readonly policyServers: { readonly current: RoleService; readonly stale: RoleService };
  readonly trainer: RoleService;
  readonly feeder: RoleService;
  readonly rollout: RoleService;
  /** The gateway (functions/gateway/), when the config sets `gateway.port`. */
  readonly gateway: RoleService | undefined;
  /** Hosts of the OS tasks' env workers (a container per episode), when an os-* task is in the mix. */
  readonly sandboxHosts: SandboxHosts | undefined;

  constructor(scope: Construct, id: string, props: ComputeStackProps) {
    super(scope, id, props);
    const { config, queues, trajectoryBucket, checkpointBucket } = props;
    const rolloutMaxWorkers = props.rolloutMaxWorkers ?? 4 * config.rollout.workers;
    requireRange("ComputeStack", "rolloutMaxWorkers", rolloutMaxWorkers, config.rollout.workers, 1000);

    const gpuInstanceType = new CfnParameter(this, "GpuInstanceType", {
      type: "String",
      default: props.gpuInstanceType ?? "g5.xlarge",
      allowedPattern: "^[a-z][a-z0-9-]*\\.[a-z0-9]+$",
      description: "EC2 GPU instance type of the trainer and policy servers (check your GPU quota first)",
    });
    this.cluster = new AgentCluster(this, "Cluster", {
      gpuInstanceType: gpuInstanceType.valueAsString,
      namespaceName: NAMESPACE,
      ...(props.natGateways !== undefined ? { natGateways: props.natGateways } : {}),
    });
    this.images = new RoleImages(this, "Images", { repositoryRoot: props.repositoryRoot });

    const common = {
      AGENTRL_CONFIG_JSON: JSON.stringify(config),
      AGENTRL_QUEUE_PREFIX: config.transport.queuePrefix,
      AGENTRL_TRAJECTORY_BUCKET: trajectoryBucket.bucketName,
      AGENTRL_CHECKPOINT_BUCKET: checkpointBucket.bucketName,
    } as const;
    // IAM from the role-access table only (shared/config/roleAccess.ts): what each role's code touches.
    const targets: GrantTargets = {
      queues: {
        "rollout-requests": queues.rolloutRequests,
        trajectories: queues.trajectories,
        "policy-events": queues.policyEvents,
      },
      buckets: { trajectories: trajectoryBucket, checkpoints: checkpointBucket },
    };
    // Shared bearer secrets (docs/security.md), generated by Secrets Manager at deploy:
    // no value ever appears in the template, a task definition or a log line.
    const sharedSecret = (id: string, description: string) => {
      const secret = new secretsmanager.Secret(this, id, {
        description,
        generateSecretString: { passwordLength: 48, excludePunctuation: true, includeSpace: false },
      });
      NagSuppressions.addResourceSuppressions(secret, [
        {
          id: "AwsSolutions-SMG4",
          reason:
            "A bearer token shared by services of one stack: rotate it by updating the secret and restarting the services (tasks read it at start); no rotation Lambda.",
        },
      ]);
      return ecs.Secret.fromSecretsManager(secret);
    };
    const envSecret = sharedSecret("EnvSecret", "agentrl: controller <-> env workers (AGENTRL_ENV_SECRET)");
    const controllerSecret = sharedSecret(
      "ControllerSecret",
      "agentrl: callers of the controller session API (AGENTRL_CONTROLLER_SECRET)",
    );
    const policyApiKey = sharedSecret(
      "PolicyApiKey",
      "agentrl: callers of the policy servers (AGENTRL_POLICY_API_KEY)",
    );
    const controllerUrl = `http://controller.${NAMESPACE}:${config.tasks.controllerPort}`;
    const policyUrl = (pool: string) => `http://policy-${pool}.${NAMESPACE}:${POLICY_SERVER_PORT}`;

    this.controller = new RoleService(this, "Controller", {
      cluster: this.cluster,
      image: this.images.functions,
      environment: {
        AGENTRL_ROLE: "controller",
        ...common,
        AGENTRL_PORT: String(config.tasks.controllerPort),
      } satisfies ContainerEnvInputOf<"controller">,
      secrets: { AGENTRL_ENV_SECRET: envSecret, AGENTRL_CONTROLLER_SECRET: controllerSecret },
      placement: { kind: "fargate", cpu: 1024, memoryMiB: 2048 },
      port: config.tasks.controllerPort,
      discoveryName: "controller",
      singleton: true,
    });

    const envWorkers = new Map<string, RoleService>();
    let mysqlSecret: ecs.Secret | undefined;
    const envPools = new Map<string, RoleService>();
    let sandboxHosts: SandboxHosts | undefined;
    for (const entry of config.tasks.mix) {
      // The OS tasks start a container per episode, which Fargate cannot: they get EC2 hosts.
      const sandboxed = needsContainerRuntime(entry.name);
      if (sandboxed) sandboxHosts ??= this.sandboxHostsFor(props);
      const worker = new RoleService(this, `Env-${entry.name}`, {
        cluster: this.cluster,
        image: this.images.env(entry.name),
        environment: {
          AGENTRL_ROLE: "env",
          ...common,
          AGENTRL_TASK: entry.name,
          AGENTRL_CONTROLLER_URL: controllerUrl,
          AGENTRL_PORT: String(ENV_WORKER_PORT),
        } satisfies ContainerEnvInputOf<"env">,
        secrets: { AGENTRL_ENV_SECRET: envSecret },
        placement:
          sandboxHosts && sandboxed
            ? {
                kind: "ec2",
                capacityProvider: sandboxHosts.capacityProvider,
                ...sandboxWorkerReservation(entry.concurrency),
              }
            : { kind: "fargate", cpu: 1024, memoryMiB: 2048 },
        port: ENV_WORKER_PORT,
        launchedBy: "pool",
      });
      if (sandboxed)
        addHostContainerRuntime(worker, {
          default: this.images.agentBenchOs("default"),
          packages: this.images.agentBenchOs("packages"),
        });
      if (needsMysql(entry.name)) {
        mysqlSecret ??= sharedSecret("MysqlSecret", "agentrl: dbbench env tasks' MySQL sidecar root password");
        addMysqlSidecar(worker, mysqlSecret);
      }
      // Workers heartbeat to the controller; the controller calls the workers back.
      this.controller.allowFrom(worker);
      worker.allowFrom(this.controller);
      envWorkers.set(entry.name, worker);
      const pool = new RoleService(this, `EnvPool-${entry.name}`, {
        cluster: this.cluster,
        image: this.images.functions,
        environment: {
          AGENTRL_ROLE: "envpool",
          ...common,
          AGENTRL_TASK: entry.name,
          AGENTRL_CONTROLLER_URL: controllerUrl,
          AGENTRL_ECS_CLUSTER: this.cluster.cluster.clusterName,
          AGENTRL_ENV_TASK_DEFINITION: worker.taskDefinition.family,
          AGENTRL_ENV_SUBNETS: Fn.join(
            ",",
            this.cluster.vpc.privateSubnets.map((subnet) => subnet.subnetId),
          ),
          AGENTRL_ENV_SECURITY_GROUPS: worker.securityGroup.securityGroupId,
          AGENTRL_ENV_CAPACITY_PROVIDER:
            sandboxHosts && sandboxed ? sandboxHosts.capacityProvider.capacityProviderName : "FARGATE",
        } satisfies ContainerEnvInputOf<"envpool">,
        secrets: { AGENTRL_CONTROLLER_SECRET: controllerSecret },
        placement: { kind: "fargate", cpu: 256, memoryMiB: 512 },
        singleton: true,
      });
      // The pool reads list_workers and drains workers through the controller.
      this.controller.allowFrom(pool);
      this.grantPoolPermissions(pool, worker);
      envPools.set(entry.name, pool);
    }
    this.envWorkers = envWorkers;
    this.envPools = envPools;
    this.sandboxHosts = sandboxHosts;

    // The GPU roles' image follows policy.backend: CUDA + tfjs-node-gpu, or Vulkan + Dawn for webgpu.
    const modelImage = this.images.modelImage(config.policy.backend);
    const policyServer = (pool: "current" | "stale") => {
      const server = new RoleService(this, `Policy-${pool}`, {
        cluster: this.cluster,
        image: modelImage,
        environment: {
          AGENTRL_ROLE: "policy",
          ...common,
          AGENTRL_POLICY_POOL: pool,
          AGENTRL_PORT: String(POLICY_SERVER_PORT),
        } satisfies ContainerEnvInputOf<"policy">,
        secrets: { AGENTRL_POLICY_API_KEY: policyApiKey },
        placement: { kind: "gpu", gpuCount: 1 },
        port: POLICY_SERVER_PORT,
        discoveryName: `policy-${pool}`,
      });
      return server;
    };
    this.policyServers = { current: policyServer("current"), stale: policyServer("stale") };

    this.trainer = new RoleService(this, "Trainer", {
      cluster: this.cluster,
      image: modelImage,
      environment: { AGENTRL_ROLE: "trainer", ...common } satisfies ContainerEnvInputOf<"trainer">,
      placement: { kind: "gpu", gpuCount: 1 },
      singleton: true,
    });

    this.feeder = new RoleService(this, "Feeder", {
      cluster: this.cluster,
      image: this.images.functions,
      environment: { AGENTRL_ROLE: "feeder", ...common } satisfies ContainerEnvInputOf<"feeder">,
      placement: { kind: "fargate", cpu: 512, memoryMiB: 1024 },
      singleton: true,
    });

    this.rollout = new RoleService(this, "Rollout", {
      cluster: this.cluster,
      image: this.images.functions,
      environment: {
        AGENTRL_ROLE: "rollout",
        ...common,
        AGENTRL_CONTROLLER_URL: controllerUrl,
        AGENTRL_POLICY_CURRENT_URL: policyUrl("current"),
        AGENTRL_POLICY_STALE_URL: policyUrl("stale"),
      } satisfies ContainerEnvInputOf<"rollout">,
      secrets: { AGENTRL_CONTROLLER_SECRET: controllerSecret, AGENTRL_POLICY_API_KEY: policyApiKey },
      placement: { kind: "fargate", cpu: 1024, memoryMiB: 2048 },
      desiredCount: config.rollout.workers,
    });
    this.rollout.scaleOnQueueDepth(queues.rolloutRequests.queue, {
      min: config.rollout.workers,
      max: rolloutMaxWorkers,
      messagesPerTask: config.rollout.concurrency * 4,
    });
    this.controller.allowFrom(this.rollout);
    this.policyServers.current.allowFrom(this.rollout);
    this.policyServers.stale.allowFrom(this.rollout);

    this.gateway =
      config.gateway.port === undefined
        ? undefined
        : this.gatewayService(config, common, policyUrl, policyApiKey, sharedSecret);

    // Every role's /metrics on a port of its own, for scrapers inside the VPC (docs/tracking.md).
    const metricsToken = sharedSecret(
      "MetricsToken",
      "agentrl: Prometheus scrapers of /metrics (AGENTRL_METRICS_TOKEN)",
    );
    // The scraper reads this secret itself (docs/tracking.md, "On AWS").
    new CfnOutput(this, "MetricsTokenSecretArn", {
      value: (this.node.findChild("MetricsToken") as secretsmanager.Secret).secretArn,
      description: "Secrets Manager secret holding AGENTRL_METRICS_TOKEN, the bearer token of every role's /metrics",
    });
    const features = accessFeaturesOf(config);
    for (const service of [
      ...(this.gateway ? [this.gateway] : []),
      this.controller,
      ...envWorkers.values(),
      ...envPools.values(),
      this.policyServers.current,
      this.policyServers.stale,
      this.trainer,
      this.feeder,
      this.rollout,
    ]) {
      grantRoleAccess(service.taskRole, forFeatures(ROLE_ACCESS[service.role], features), targets);
      service.acknowledgeGrantWildcards();
      service.exposeMetrics(METRICS_PORT, metricsToken, ec2.Peer.ipv4(this.cluster.vpc.vpcCidrBlock));
    }
  }

  /**
   * The gateway: one task (its sessions live in memory, so a second copy would split them),
   * reachable inside the VPC at `gateway.<namespace>:<gateway.port>` (8080 when the port is 0);
   * put your own load balancer in front to reach it from elsewhere. The admin key is a Secrets
   * Manager secret like the other shared keys; it reaches only this service.
   */
  private gatewayService(
    config: ExperimentConfig,
    common: Record<string, string>,
    policyUrl: (pool: string) => string,
    policyApiKey: ecs.Secret,
    sharedSecret: (id: string, description: string) => ecs.Secret,
  ): RoleService {
    const port = config.gateway.port || GATEWAY_PORT;
    const gateway = new RoleService(this, "Gateway", {
      cluster: this.cluster,
      image: this.images.functions,
      environment: {
        AGENTRL_ROLE: "gateway",
        ...(common as Omit<ContainerEnvInputOf<"gateway">, "AGENTRL_ROLE" | "AGENTRL_POLICY_CURRENT_URL">),
        AGENTRL_POLICY_CURRENT_URL: policyUrl("current"),
        AGENTRL_POLICY_STALE_URL: policyUrl("stale"),
        AGENTRL_PORT: String(port),
      } satisfies ContainerEnvInputOf<"gateway">,
      secrets: {
        AGENTRL_GATEWAY_ADMIN_KEY: sharedSecret(
          "GatewayAdminKey",
          "agentrl: who may open gateway sessions (AGENTRL_GATEWAY_ADMIN_KEY)",
        ),
        AGENTRL_POLICY_API_KEY: policyApiKey,
      },
      placement: { kind: "fargate", cpu: 1024, memoryMiB: 2048 },
      port,
      discoveryName: "gateway",
      singleton: true,
    });
    this.policyServers.current.allowFrom(gateway);
    this.policyServers.stale.allowFrom(gateway);
    gateway.securityGroup.addIngressRule(
      ec2.Peer.ipv4(this.cluster.vpc.vpcCidrBlock),
      ec2.Port.tcp(port),
      "agents inside the VPC call the gateway",
    );
    NagSuppressions.addResourceSuppressions(gateway.securityGroup, [
      {
        id: "AwsSolutions-EC23",
        reason:
          "Ingress is the VPC's own CIDR (a deploy-time token cdk-nag cannot resolve), never 0.0.0.0/0: agents inside the VPC call the gateway; every call needs the admin or a session key.",
      },
    ]);
    return gateway;
  }

  /** The OS tasks' sandbox hosts, with their instance type as a stack parameter. */
  private sandboxHostsFor(props: ComputeStackProps): SandboxHosts {
    const instanceType = new CfnParameter(this, "SandboxInstanceType", {
      type: "String",
      default: props.sandboxInstanceType ?? "m6i.2xlarge",
      allowedPattern: "^[a-z][a-z0-9-]*\\.[a-z0-9]+$",
      description: "EC2 instance type of the hosts that run the AgentBench OS tasks' episode containers",
    });
    return new SandboxHosts(this, "OsSandboxHosts", {
      cluster: this.cluster,
      instanceType: instanceType.valueAsString,
    });
  }

  /**
   * What an env pool may do in ECS: run its task's env task definition in this cluster (tagged),
   * describe, list and stop tasks of this cluster, and pass that task definition's two roles.
   */
  private grantPoolPermissions(pool: RoleService, worker: RoleService): void {
    const clusterArn = this.cluster.cluster.clusterArn;
    const inCluster = { ArnEquals: { "ecs:cluster": clusterArn } };
    const clusterName = this.cluster.cluster.clusterName;
    const arn = (resource: string, resourceName: string) =>
      this.formatArn({ service: "ecs", resource, resourceName, arnFormat: ArnFormat.SLASH_RESOURCE_NAME });
    pool.taskRole.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ["ecs:RunTask"],
        resources: [
          this.formatArn({
            service: "ecs",
            resource: "task-definition",
            resourceName: `${worker.taskDefinition.family}:*`,
            arnFormat: ArnFormat.SLASH_RESOURCE_NAME,
          }),
        ],
        conditions: inCluster,
      }),
    );
    pool.taskRole.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ["ecs:StopTask", "ecs:DescribeTasks"],
        resources: [arn("task", `${clusterName}/*`)],
        conditions: inCluster,
      }),
    );
    pool.taskRole.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ["ecs:TagResource"],
        resources: [arn("task", `${clusterName}/*`)],
        conditions: { StringEquals: { "ecs:CreateAction": "RunTask" } },
      }),
    );
    pool.taskRole.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ["ecs:ListTasks"],
        resources: [arn("container-instance", `${clusterName}/*`)],
        conditions: inCluster,
      }),
    );
    const roles = [worker.taskDefinition.taskRole, worker.taskDefinition.executionRole].filter(
      (role): role is iam.IRole => role !== undefined,
    );
    pool.taskRole.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ["iam:PassRole"],
        resources: roles.map((role) => role.roleArn),
        conditions: { StringEquals: { "iam:PassedToService": "ecs-tasks.amazonaws.com" } },
      }),
    );
    NagSuppressions.addResourceSuppressions(
      pool.taskRole,
      [
        {
          id: "AwsSolutions-IAM5",
          reason:
            "Env pool: task ids are unknown before RunTask, so StopTask/DescribeTasks/TagResource name this cluster's " +
            "tasks (task/<cluster>/*) with an ecs:cluster condition; ListTasks only accepts container-instance " +
            "resources; RunTask names the env task definition's family at any revision.",
          appliesTo: [
            {
              regex:
                "/^Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:(task|container-instance)\\/<[A-Za-z0-9]+>\\/\\*$/",
            },
            {
              regex:
                "/^Resource::arn:<AWS::Partition>:ecs:<AWS::Region>:<AWS::AccountId>:task-definition\\/[A-Za-z0-9-]+:\\*$/",
            },
          ],
        },
      ],
      true,
    );
  }
}
