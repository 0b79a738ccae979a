import { Duration, RemovalPolicy } from "aws-cdk-lib";
import * as s3 from "aws-cdk-lib/aws-s3";
import { NagSuppressions } from "cdk-nag";
import { Construct } from "constructs";
import { requireDurationRange } from "./validate.ts";

/** Props of {@link Stores}. */
export interface StoresProps {
  /**
   * Trajectories older than this are deleted (they are consumed once by the trainer; old ones
   * serve only debugging). Checkpoints are never expired.
   * @default - 30 days
   */
  readonly trajectoryRetention?: Duration;
  /**
   * Non-current versions (overwritten or deleted objects) are kept this long in both buckets.
   * @default - 7 days
   */
  readonly noncurrentRetention?: Duration;
  /**
   * What `cdk destroy` does with the buckets.
   * @default - RETAIN: checkpoints and trajectories outlive the stack
   */
  readonly removalPolicy?: RemovalPolicy;
}

const MAX_RETENTION = Duration.days(3650);

/**
 * The two object stores of the pipeline: trajectories (claim-check payloads of TrajectoryReady
 * events) and checkpoints (`policies/vN/`). Both versioned, S3-encrypted, TLS-only, closed to the
 * public, logged to an access-log bucket, and retained when the stack is deleted.
 */
export class Stores extends Construct {
  readonly trajectoryBucket: s3.IBucket;
  readonly checkpointBucket: s3.IBucket;
  readonly accessLogBucket: s3.IBucket;

  constructor(scope: Construct, id: string, props: StoresProps = {}) {
    super(scope, id);
    const trajectoryRetention = props.trajectoryRetention ?? Duration.days(30);
    const noncurrentRetention = props.noncurrentRetention ?? Duration.days(7);
    requireDurationRange("Stores", "trajectoryRetention", trajectoryRetention, Duration.days(1), MAX_RETENTION);
    requireDurationRange("Stores", "noncurrentRetention", noncurrentRetention, Duration.days(1), MAX_RETENTION);
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;

    const secure = {
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      removalPolicy,
    } as const;

    const accessLogs = new s3.Bucket(this, "AccessLogs", {
      ...secure,
      // S3 server access logging requires the log-delivery ACL-less policy path; keep logs 90 days.
      lifecycleRules: [{ id: "expire-access-logs", expiration: Duration.days(90) }],
    });
    NagSuppressions.addResourceSuppressions(accessLogs, [
      { id: "AwsSolutions-S1", reason: "This is the access-log bucket itself; logging it into itself would loop." },
    ]);
    this.accessLogBucket = accessLogs;

    this.trajectoryBucket = new s3.Bucket(this, "Trajectories", {
      ...secure,
      versioned: true,
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: "trajectories/",
      lifecycleRules: [
        {
          id: "expire-old-trajectories",
          expiration: trajectoryRetention,
          noncurrentVersionExpiration: noncurrentRetention,
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
      ],
    });

    this.checkpointBucket = new s3.Bucket(this, "Checkpoints", {
      ...secure,
      versioned: true,
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: "checkpoints/",
      lifecycleRules: [
        {
          id: "expire-overwritten-checkpoints",
          noncurrentVersionExpiration: noncurrentRetention,
          abortIncompleteMultipartUploadAfter: Duration.days(1),
        },
      ],
    });
  }
}
