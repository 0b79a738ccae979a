import { z } from "zod";

export const TransportConfig = z
  .object({
    /** `local`: SQLite queues + a directory store (embedded default). `aws`: SQS + S3 at `endpoint` or in AWS. */
    kind: z.enum(["local", "aws"]).default("local").describe("local (embedded default) or aws (SQS + S3)"),
    /** Root folder of the local transport's queue database and object directories. */
    localDir: z.string().default(".agentrl/transport").describe("folder for the local transport"),
    /** AWS-API endpoint (moto server, LocalStack); unset means real AWS. */
    endpoint: z.string().url().optional().describe("AWS-API endpoint override, e.g. http://127.0.0.1:4566"),
    region: z.string().default("us-east-1").describe("AWS region"),
    /** Prefix of SQS queue names: `<prefix>-rollout-requests` etc. */
    queuePrefix: z
      .string()
      .regex(/^[A-Za-z0-9_-]{1,40}$/)
      .default("agentrl")
      .describe("SQS queue name prefix"),
    trajectoryBucket: z.string().default("agentrl-trajectories").describe("S3 bucket for trajectories"),
    checkpointBucket: z.string().default("agentrl-checkpoints").describe("S3 bucket for policies/vN/"),
    /** Deliveries before a message moves to its dead-letter queue. */
    maxReceiveCount: z.number().int().min(1).max(1000).default(5).describe("deliveries before dead-lettering"),
    /** Default visibility timeout of received messages, seconds. */
    visibilityTimeoutSeconds: z.number().int().min(1).max(43_200).default(300).describe("queue visibility timeout (s)"),
    /**
     * How long creating the queues and buckets at an `endpoint` keeps trying while it refuses
     * connections or does not answer: a moto server or LocalStack started a moment before is often
     * not listening yet. No request is left hanging past it (at least 5 s are given to one try).
     */
    endpointWaitSeconds: z
      .number()
      .int()
      .min(0)
      .max(600)
      .default(30)
      .describe("how long to wait for an endpoint that is not up yet (s)"),
  })
  .strict();
export type TransportConfig = z.infer<typeof TransportConfig>;
