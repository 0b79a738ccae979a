import { RemovalPolicy, Token } from "aws-cdk-lib";
import * as autoscaling from "aws-cdk-lib/aws-autoscaling";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecs from "aws-cdk-lib/aws-ecs";
import * as iam from "aws-cdk-lib/aws-iam";
import * as logs from "aws-cdk-lib/aws-logs";
import * as servicediscovery from "aws-cdk-lib/aws-servicediscovery";
import { NagSuppressions } from "cdk-nag";
import { Construct } from "constructs";
import { InvalidPropError, requireRange } from "./validate.ts";

/** Props of {@link AgentCluster}. */
export interface AgentClusterProps {
  /**
   * EC2 instance type of the GPU capacity (trainer and policy servers), e.g. `g5.xlarge`; may be
   * a CloudFormation parameter's value. Each GPU task takes one GPU of one instance.
   */
  readonly gpuInstanceType: string;
  /**
   * Most GPU instances the capacity provider may start (one per GPU task with 1-GPU instances:
   * trainer + current + stale policy server = 3).
   * @default - 3
   */
  readonly gpuMaxInstances?: number;
  /**
   * Root EBS volume of GPU instances in GiB (the ECS GPU AMI plus image layers).
   * @default - 100
   */
  readonly gpuVolumeGiB?: number;
  /**
   * NAT gateways of the VPC (tasks in private subnets pull images and reach AWS APIs through
   * them). One saves cost; one per AZ survives an AZ outage.
   * @default - 1
   */
  readonly natGateways?: number;
  /**
   * Private DNS namespace for service discovery (`controller.<namespace>`).
   * @default - "agentrl.local"
   */
  readonly namespaceName?: string;
}

const INSTANCE_TYPE = /^[a-z][a-z0-9-]*\.[a-z0-9]+$/;

/**
 * Where every role runs: a VPC (private subnets behind NAT, flow logs on), an ECS cluster with
 * Container Insights, a Cloud Map namespace for service discovery, and a GPU EC2 capacity
 * provider (ECS GPU-optimized AMI, IMDSv2, encrypted volumes) that scales with the GPU tasks.
 */
export class AgentCluster extends Construct {
  readonly vpc: ec2.IVpc;
  readonly cluster: ecs.Cluster;
  readonly namespace: servicediscovery.IPrivateDnsNamespace;
  readonly gpuCapacityProvider: ecs.AsgCapacityProvider;

  constructor(scope: Construct, id: string, props: AgentClusterProps) {
    super(scope, id);
    if (!Token.isUnresolved(props.gpuInstanceType) && !INSTANCE_TYPE.test(props.gpuInstanceType))
      throw new InvalidPropError(
        `AgentCluster: gpuInstanceType must be an EC2 instance type like g5.xlarge, got "${props.gpuInstanceType}"`,
      );
    const gpuMaxInstances = props.gpuMaxInstances ?? 3;
    requireRange("AgentCluster", "gpuMaxInstances", gpuMaxInstances, 1, 100);
    const gpuVolumeGiB = props.gpuVolumeGiB ?? 100;
    requireRange("AgentCluster", "gpuVolumeGiB", gpuVolumeGiB, 30, 16_384);
    const natGateways = props.natGateways ?? 1;
    requireRange("AgentCluster", "natGateways", natGateways, 1, 3);

    const flowLogGroup = new logs.LogGroup(this, "FlowLogs", {
      retention: logs.RetentionDays.ONE_MONTH,
      removalPolicy: RemovalPolicy.DESTROY,
    });
    const vpc = new ec2.Vpc(this, "Vpc", {
      maxAzs: 2,
      natGateways,
      subnetConfiguration: [
        { name: "public", subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: "private", subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
      ],
      flowLogs: { all: { destination: ec2.FlowLogDestination.toCloudWatchLogs(flowLogGroup) } },
    });
    this.vpc = vpc;

    this.cluster = new ecs.Cluster(this, "Cluster", {
      vpc,
      containerInsightsV2: ecs.ContainerInsights.ENABLED,
    });
    this.namespace = new servicediscovery.PrivateDnsNamespace(this, "Namespace", {
      name: props.namespaceName ?? "agentrl.local",
      vpc,
    });

    const instanceRole = new iam.Role(this, "GpuInstanceRole", {
      assumedBy: new iam.ServicePrincipal("ec2.amazonaws.com"),
    });
    const launchTemplate = new ec2.LaunchTemplate(this, "GpuLaunchTemplate", {
      instanceType: new ec2.InstanceType(props.gpuInstanceType),
      machineImage: ecs.EcsOptimizedImage.amazonLinux2(ecs.AmiHardwareType.GPU),
      userData: ec2.UserData.forLinux(),
      role: instanceRole,
      requireImdsv2: true,
      securityGroup: new ec2.SecurityGroup(this, "GpuInstances", { vpc, description: "GPU container instances" }),
      blockDevices: [
        {
          deviceName: "/dev/xvda",
          volume: ec2.BlockDeviceVolume.ebs(gpuVolumeGiB, { encrypted: true, volumeType: ec2.EbsDeviceVolumeType.GP3 }),
        },
      ],
    });
    const gpuGroup = new autoscaling.AutoScalingGroup(this, "GpuGroup", {
      vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      launchTemplate,
      minCapacity: 0,
      maxCapacity: gpuMaxInstances,
    });
    this.gpuCapacityProvider = new ecs.AsgCapacityProvider(this, "GpuCapacity", {
      autoScalingGroup: gpuGroup,
      machineImageType: ecs.MachineImageType.AMAZON_LINUX_2,
      // Scale-in is driven by ECS managed scaling; protection would block `cdk destroy`.
      enableManagedTerminationProtection: false,
      // ECS managed draining moves tasks off a terminating instance; no extra Lambda drain hook.
      enableManagedDraining: true,
    });
    this.cluster.addAsgCapacityProvider(this.gpuCapacityProvider);

    NagSuppressions.addResourceSuppressions(
      gpuGroup,
      [
        {
          id: "AwsSolutions-AS3",
          reason: "ECS managed scaling drives this group; scaling events are visible in the ECS service events.",
        },
      ],
      true,
    );
    NagSuppressions.addResourceSuppressions(
      instanceRole,
      [
        {
          id: "AwsSolutions-IAM5",
          reason:
            "Statements added by CDK's AsgCapacityProvider for the ECS agent (ecs:DiscoverPollEndpoint, ecs:Poll, " +
            "ecr:GetAuthorizationToken, ...) that AWS defines on resource '*'; no application grant.",
          appliesTo: ["Resource::*", "Action::ecs:Submit*"],
        },
      ],
      true,
    );
  }
}
