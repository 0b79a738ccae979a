import { Stack, type StackProps } from "aws-cdk-lib";
import type * as ec2 from "aws-cdk-lib/aws-ec2";
import type * as ecs from "aws-cdk-lib/aws-ecs";
import type * as s3 from "aws-cdk-lib/aws-s3";
import type { Construct } from "constructs";
import type { SweepSpec } from "../../shared/config/sweep.ts";
import { SweepSchedule } from "../constructs/sweepSchedule.ts";

/** Props of {@link SweepStack}. */
export interface SweepStackProps extends StackProps {
  readonly cluster: ecs.ICluster;
  readonly vpc: ec2.IVpc;
  readonly image: ecs.ContainerImage;
  readonly resultsBucket: s3.IBucket;
  /** One schedule per spec (each must carry a `schedule`). */
  readonly sweeps: readonly SweepSpec[];
}

/** Scheduled sweeps: one EventBridge Scheduler schedule per sweep spec. */
export class SweepStack extends Stack {
  readonly schedules: readonly SweepSchedule[];

  constructor(scope: Construct, id: string, props: SweepStackProps) {
    super(scope, id, props);
    this.schedules = props.sweeps.map(
      (spec) =>
        new SweepSchedule(this, `Sweep-${spec.name}`, {
          cluster: props.cluster,
          vpc: props.vpc,
          image: props.image,
          spec,
          resultsBucket: props.resultsBucket,
        }),
    );
  }
}
