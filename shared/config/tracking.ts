import { z } from "zod";

/**
 * Where a run's metrics go besides metrics.jsonl (which stays the source of truth). A tracker
 * never blocks or fails training: writes wait in a bounded queue, a failed write is retried with
 * backoff, and what cannot be written is dropped, warned about once and counted
 * (`tracking/dropped` in metrics.jsonl). Credentials come only from environment variables.
 */
export const TrackingConfig = z
  .object({
    tensorboard: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe("write TensorBoard event files (every metric as a scalar per step)"),
        dir: z
          .string()
          .min(1)
          .optional()
          .describe(
            "folder of the event files (default: <run folder>/tensorboard beside metrics.jsonl; on the AWS transport the trajectory bucket's tensorboard/<experimentId>/, read as s3://)",
          ),
      })
      .strict()
      .prefault({})
      .describe("TensorBoard: `tensorboard --logdir <run folder>/tensorboard`"),
    mlflow: z
      .object({
        trackingUri: z
          .url({ protocol: /^https?$/ })
          .describe(
            "MLflow tracking server, e.g. http://mlflow:5000 (token: MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME + MLFLOW_TRACKING_PASSWORD)",
          ),
        experiment: z
          .string()
          .min(1)
          .max(500)
          .describe("MLflow experiment name (created when missing); the run is named after experimentId"),
      })
      .strict()
      .optional()
      .describe("MLflow over its REST API (unset: off)"),
    wandb: z
      .object({
        project: z
          .string()
          .min(1)
          .max(128)
          .regex(/^[^/\\#?%:]+$/, "must not contain / \\ # ? % or :")
          .describe("W&B project (created when missing); the run is named after experimentId"),
        entity: z
          .string()
          .min(1)
          .optional()
          .describe("W&B entity (user or team) that owns the project (default: the API key's default entity)"),
        baseUrl: z
          .url({ protocol: /^https?$/ })
          .optional()
          .describe(
            "W&B API host (default: WANDB_BASE_URL, else https://api.wandb.ai); the API key comes only from WANDB_API_KEY",
          ),
      })
      .strict()
      .optional()
      .describe("Weights & Biases over its HTTP API: GraphQL upsertBucket + file_stream (unset: off)"),
    queueLimit: z
      .number()
      .int()
      .min(1)
      .max(1_000_000)
      .default(1000)
      .describe("records waiting per tracker at most; beyond it a record is dropped and counted"),
    retries: z
      .number()
      .int()
      .min(0)
      .max(20)
      .default(4)
      .describe("retries of a failed tracker write before it is dropped"),
    retryBaseSeconds: z
      .number()
      .positive()
      .max(60)
      .default(0.5)
      .describe("first retry's backoff (s); each further retry doubles it"),
    finishSeconds: z
      .number()
      .nonnegative()
      .max(600)
      .default(30)
      .describe("how long the trainer waits at exit for queued tracker writes (s)"),
  })
  .strict();
export type TrackingConfig = z.infer<typeof TrackingConfig>;
