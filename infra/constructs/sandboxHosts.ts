import * as autoscaling from "aws-cdk-lib/aws-autoscaling";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecs from "aws-cdk-lib/aws-ecs";
import * as iam from "aws-cdk-lib/aws-iam";
import { NagSuppressions } from "cdk-nag";
import { Construct } from "constructs";
import type { AgentCluster } from "./cluster.ts";
import { requireRange } from "./validate.ts";

/** Props of {@link SandboxHosts}. */
export interface SandboxHostsProps {
  readonly cluster: AgentCluster;
  /**
   * EC2 instance type of the hosts (may be a CloudFormation parameter's value). Each env worker
   * task reserves its episodes' memory (concurrency x 1 GiB, upstream's cap) next to its own.
   */
  readonly instanceType: string;
  /** Most hosts the capacity provider may start. @default - 2 */
  readonly maxInstances?: number;
  /**
   * Root EBS volume in GiB: the AMI, the episode images (about 1 GB) and each running episode's
   * writable layer (capped at 1 GiB by the sandbox's disk guard).
   * @default - 100
   */
  readonly volumeGiB?: number;
}

/**
 * Lines the hosts' ECS agent reads: no task may ask for a privileged container, and awsvpc tasks
 * cannot reach the instance metadata service (so not the instance role either).
 */
export const SANDBOX_AGENT_CONFIG: readonly string[] = ["ECS_DISABLE_PRIVILEGED=true", "ECS_AWSVPC_BLOCK_IMDS=true"];

/**
 * The hosts of the AgentBench OS tasks' env workers: a CPU EC2 capacity provider of its own,
 * because each OS episode is a container of its own and Fargate cannot start containers from a
 * task (no Docker socket, no privileged mode, no nested runtime). Only the OS env worker tasks
 * are placed here (their pool asks for this provider by name); each mounts the host's Docker
 * socket to start its episodes (see osSandbox.ts and docs/security.md for what that grants).
 * The hosts: ECS-optimized Amazon Linux 2023, IMDSv2 with a hop limit of 1 (a container on
 * Docker's bridge cannot fetch a token), encrypted gp3 volume, no inbound rule on the instance's
 * security group (tasks have their own ENI and group).
 */
export class SandboxHosts extends Construct {
  readonly capacityProvider: ecs.AsgCapacityProvider;
  readonly securityGroup: ec2.SecurityGroup;

  constructor(scope: Construct, id: string, props: SandboxHostsProps) {
    super(scope, id);
    const maxInstances = props.maxInstances ?? 2;
    requireRange("SandboxHosts", "maxInstances", maxInstances, 1, 100);
    const volumeGiB = props.volumeGiB ?? 100;
    requireRange("SandboxHosts", "volumeGiB", volumeGiB, 30, 16_384);
    const { vpc, cluster } = props.cluster;

    const role = new iam.Role(this, "InstanceRole", { assumedBy: new iam.ServicePrincipal("ec2.amazonaws.com") });
    this.securityGroup = new ec2.SecurityGroup(this, "Instances", {
      vpc,
      description: "agentrl OS sandbox hosts (no inbound: tasks have their own ENIs)",
    });
    const userData = ec2.UserData.forLinux();
    userData.addCommands(...SANDBOX_AGENT_CONFIG.map((line) => `echo ${line} >> /etc/ecs/ecs.config`));
    const launchTemplate = new ec2.LaunchTemplate(this, "LaunchTemplate", {
      instanceType: new ec2.InstanceType(props.instanceType),
      machineImage: ecs.EcsOptimizedImage.amazonLinux2023(),
      userData,
      role,
      requireImdsv2: true,
      httpPutResponseHopLimit: 1,
      securityGroup: this.securityGroup,
      blockDevices: [
        {
          deviceName: "/dev/xvda",
          volume: ec2.BlockDeviceVolume.ebs(volumeGiB, { encrypted: true, volumeType: ec2.EbsDeviceVolumeType.GP3 }),
        },
      ],
    });
    const group = new autoscaling.AutoScalingGroup(this, "Group", {
      vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      launchTemplate,
      minCapacity: 0,
      maxCapacity: maxInstances,
    });
    this.capacityProvider = new ecs.AsgCapacityProvider(this, "Capacity", {
      autoScalingGroup: group,
      machineImageType: ecs.MachineImageType.AMAZON_LINUX_2,
      enableManagedTerminationProtection: false,
      enableManagedDraining: true,
    });
    cluster.addAsgCapacityProvider(this.capacityProvider);

    NagSuppressions.addResourceSuppressions(
      group,
      [
        {
          id: "AwsSolutions-AS3",
          reason: "ECS managed scaling drives this group; scaling events are visible in the ECS service events.",
        },
      ],
      true,
    );
    NagSuppressions.addResourceSuppressions(
      role,
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
