import { RemovalPolicy, TimeZone } from "aws-cdk-lib";
import * as ec2 from "aws-cdk-lib/aws-ec2";
import * as ecs from "aws-cdk-lib/aws-ecs";
import * as logs from "aws-cdk-lib/aws-logs";
import type * as s3 from "aws-cdk-lib/aws-s3";
import * as scheduler from "aws-cdk-lib/aws-scheduler";
import * as targets from "aws-cdk-lib/aws-scheduler-targets";
import { NagSuppressions } from "cdk-nag";
import { Construct } from "constructs";
import type { ContainerEnvInputOf } from "../../shared/config/containerEnv.ts";
import { ROLE_ACCESS } from "../../shared/config/roleAccess.ts";
import { expandGrid, type SweepSpec } from "../../shared/config/sweep.ts";
import { grantRoleAccess } from "./roleGrants.ts";
import { InvalidPropError, requireRange } from "./validate.ts";

/** Props of {@link SweepSchedule}. */
export interface SweepScheduleProps {
  readonly cluster: ecs.ICluster;
  readonly vpc: ec2.IVpc;
  /** Image holding `agentrl sweep` and TF.js (the trainer image's CPU variant: Fargate has no GPU). */
  readonly image: ecs.ContainerImage;
  /** The sweep; must carry a `schedule`. Its grid is expanded and validated at synth. */
  readonly spec: SweepSpec;
  /** Receives each grid point's run folder under `sweeps/<name>/<point>/`. */
  readonly resultsBucket: s3.IBucket;
  /** @default - 4096 (4 vCPU): every point runs the embedded pipeline inside the task */
  readonly cpu?: number;
  /** @default - 16384 */
  readonly memoryMiB?: number;
}

/**
 * A scheduled sweep: an EventBridge Scheduler schedule that runs one Fargate task, which runs
 * `agentrl sweep` on the spec — one experiment per grid point, one after another, each run
 * folder uploaded to the results bucket.
 */
export class SweepSchedule extends Construct {
  readonly schedule: scheduler.Schedule;
  readonly taskDefinition: ecs.FargateTaskDefinition;
  /** Experiments one run of the schedule starts. */
  readonly gridPoints: number;

  constructor(scope: Construct, id: string, props: SweepScheduleProps) {
    super(scope, id);
    const { spec } = props;
    if (spec.schedule === undefined)
      throw new InvalidPropError(
        `SweepSchedule(${spec.name}): spec.schedule is required to deploy a sweep, e.g. "rate(7 days)"`,
      );
    // Fails synth with the point and field if any grid point is not a valid experiment.
    this.gridPoints = expandGrid(spec).length;
    const cpu = props.cpu ?? 4096;
    const memoryMiB = props.memoryMiB ?? 16_384;
    requireRange(`SweepSchedule(${spec.name})`, "memoryMiB", memoryMiB, 512, 122_880);

    this.taskDefinition = new ecs.FargateTaskDefinition(this, "Task", {
      cpu,
      memoryLimitMiB: memoryMiB,
      runtimePlatform: { cpuArchitecture: ecs.CpuArchitecture.X86_64 },
    });
    const environment: ContainerEnvInputOf<"sweep"> = {
      AGENTRL_ROLE: "sweep",
      AGENTRL_SWEEP_JSON: JSON.stringify(spec),
      AGENTRL_RESULTS_BUCKET: props.resultsBucket.bucketName,
    };
    this.taskDefinition.addContainer("Sweep", {
      image: props.image,
      environment: { ...environment },
      logging: ecs.LogDrivers.awsLogs({
        streamPrefix: `sweep-${spec.name}`,
        logGroup: new logs.LogGroup(this, "Logs", {
          retention: logs.RetentionDays.ONE_MONTH,
          removalPolicy: RemovalPolicy.DESTROY,
        }),
      }),
    });
    // The table's row for the sweep role, narrowed to this sweep's own folder.
    grantRoleAccess(
      this.taskDefinition.taskRole,
      ROLE_ACCESS.sweep,
      { buckets: { checkpoints: props.resultsBucket } },
      (prefix) => `${prefix}${spec.name}/`,
    );

    const securityGroup = new ec2.SecurityGroup(this, "Tasks", {
      vpc: props.vpc,
      description: `agentrl sweep ${spec.name}`,
    });
    this.schedule = new scheduler.Schedule(this, "Schedule", {
      description: `agentrl sweep ${spec.name}: ${this.gridPoints} experiments`,
      schedule: spec.schedule.startsWith("cron(")
        ? scheduler.ScheduleExpression.expression(spec.schedule, TimeZone.of(spec.timezone))
        : scheduler.ScheduleExpression.expression(spec.schedule),
      target: new targets.EcsRunFargateTask(props.cluster, {
        taskDefinition: this.taskDefinition,
        taskCount: 1,
        vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
        securityGroups: [securityGroup],
      }),
    });

    NagSuppressions.addResourceSuppressions(
      this.taskDefinition,
      [
        {
          id: "AwsSolutions-ECS2",
          reason: "The environment holds the sweep spec and a bucket name only (no secrets).",
        },
        {
          id: "AwsSolutions-IAM5",
          reason:
            "Results go to sweeps/<name>/* (one key per run file, prefix-scoped); execution role's ecr:GetAuthorizationToken is AWS-defined on '*'.",
        },
      ],
      true,
    );
  }
}
