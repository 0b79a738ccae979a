import { CfnOutput, Stack, type StackProps } from "aws-cdk-lib";
import type * as s3 from "aws-cdk-lib/aws-s3";
import type { Construct } from "constructs";
import { Stores, type StoresProps } from "../constructs/stores.ts";

/** Props of {@link StoresStack}. */
export interface StoresStackProps extends StackProps {
  /** @default - Stores defaults (30-day trajectories, retained buckets) */
  readonly stores?: StoresProps;
}

/**
 * The stateful stack: trajectory and checkpoint buckets. Kept apart from compute so that
 * redeploying or destroying services never touches data; construct ids here must stay stable
 * (a changed id would replace a bucket).
 */
export class StoresStack extends Stack {
  readonly trajectoryBucket: s3.IBucket;
  readonly checkpointBucket: s3.IBucket;

  constructor(scope: Construct, id: string, props: StoresStackProps = {}) {
    super(scope, id, props);
    const stores = new Stores(this, "Stores", props.stores);
    this.trajectoryBucket = stores.trajectoryBucket;
    this.checkpointBucket = stores.checkpointBucket;
    // Generated names (bucket names are global): roles run outside ECS (LocalStack, a laptop) need them.
    new CfnOutput(this, "TrajectoryBucketName", { value: this.trajectoryBucket.bucketName });
    new CfnOutput(this, "CheckpointBucketName", { value: this.checkpointBucket.bucketName });
  }
}
