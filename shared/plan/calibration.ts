import { z } from "zod";

/**
 * The calibration file `agentrl plan` runs on: per-role costs measured on this machine (written
 * by `npm run calibrate`), published GPU figures (not measured here, each with its source), AWS
 * service limits and a pinned price table (each figure with the page it came from and the date,
 * or marked as an assumption where no stored page gave one).
 */

/** Where a figure came from: measured here (command + load), a published page, or an assumption. */
export const Source = z
  .object({
    kind: z.enum(["measured", "published", "assumption", "fitted"]),
    /** measured: the command; published: the URL; assumption/fitted: what it rests on. */
    ref: z.string().min(1),
    /** ISO date the figure was measured or the page was read. */
    date: z.string().regex(/^\d{4}-\d{2}-\d{2}$/, "YYYY-MM-DD"),
    note: z.string().optional(),
  })
  .strict();
export type Source = z.infer<typeof Source>;

/** A lognormal delay: median, log-sd and a cap, ms (the latency task's own shape). */
export const Lognormal = z
  .object({
    medianMs: z.number().min(0),
    sigma: z.number().min(0).max(4),
    maxMs: z.number().positive(),
  })
  .strict();
export type Lognormal = z.infer<typeof Lognormal>;

/** What one episode of a task costs the environment and the policy. */
export const TaskCost = z
  .object({
    /** start_sample: creating the session (container start included for exclusive tasks). */
    startMs: Lognormal,
    /** One environment action (interact). */
    stepMs: Lognormal,
    /** Policy calls per episode (mean; fractional means a mix of floor and ceil). */
    turns: z.number().positive(),
    /** Environment actions per episode: usually turns (one per tool call); turns - 1 when the last answer ends it. */
    envSteps: z.number().min(0),
    promptTokens: z.number().int().min(1),
    /** Generated tokens per policy call. */
    tokensPerTurn: z.number().int().min(1),
    /** Tokens an environment observation adds to the context. */
    observationTokens: z.number().int().min(0),
    /** Group members share their delays (the latency task's instances are deterministic by index). */
    groupSharesDelays: z.boolean().default(false),
    source: Source,
  })
  .strict();
export type TaskCost = z.infer<typeof TaskCost>;

/** One policy server's decode: aggregate tokens/s at c concurrent sequences (piecewise linear, flat past the last point). */
export const DecodeProfile = z
  .object({
    tokPerSByConcurrency: z
      .array(z.tuple([z.number().int().min(1), z.number().positive()]))
      .min(1)
      .refine((points) => points.every((p, i) => i === 0 || p[0] > (points[i - 1] as [number, number])[0]), {
        message: "concurrency points must increase",
      }),
    /** Per call: HTTP, prefill and scheduling (ms). */
    overheadMsPerCall: z.number().min(0),
    /** Price-table key of the instance a server runs on, and servers (GPUs) per instance. */
    instance: z.string().min(1),
    serversPerInstance: z.number().int().min(1),
    source: Source,
  })
  .strict();
export type DecodeProfile = z.infer<typeof DecodeProfile>;

export const TrainerProfile = z
  .object({
    /** Training tokens/s of one device (forward + backward + optimizer). */
    tokPerSPerDevice: z.number().positive(),
    /** Fixed cost per step (s): reading trajectories, advantages, metrics. */
    stepOverheadS: z.number().min(0),
    /** Writing a version to the checkpoint store (s). */
    publishS: z.number().min(0),
    /** Data-parallel efficiency exponent: G devices give G^e times one. */
    scalingExponent: z.number().gt(0).max(1),
    instance: z.string().min(1),
    devicesPerInstance: z.number().int().min(1),
    source: Source,
  })
  .strict();
export type TrainerProfile = z.infer<typeof TrainerProfile>;

export const PriceEntry = z
  .object({
    onDemandPerHour: z.number().positive(),
    spotPerHour: z.number().positive(),
    vcpus: z.number().int().min(1),
    gpus: z.number().int().min(0),
    source: Source,
    spotSource: Source,
  })
  .strict();
export type PriceEntry = z.infer<typeof PriceEntry>;

export const Limit = z.object({ value: z.number().positive(), source: Source }).strict();

export const Calibration = z
  .object({
    schemaVersion: z.literal(1),
    /** The machine the measured figures come from. */
    machine: z.string().min(1),
    controller: z
      .object({
        /** One controller process: requests/s it keeps up with (p99 < 50 ms). */
        saturationReqPerS: z.number().positive(),
        cpuMsPerRequest: z.number().positive(),
        source: Source,
      })
      .strict(),
    rollout: z
      .object({
        /** Per episode, outside env and policy calls: session bookkeeping, trajectory assembly (ms). */
        overheadMsPerEpisode: z.number().min(0),
        source: Source,
      })
      .strict(),
    feeder: z.object({ pollMs: z.number().positive(), source: Source }).strict(),
    queue: z.object({ latencyMs: z.number().min(0), source: Source }).strict(),
    store: z.object({ putMs: z.number().min(0), getMs: z.number().min(0), source: Source }).strict(),
    /** Policy servers learn of a version by polling (policy.pollSeconds). */
    policyPollSeconds: z.number().positive(),
    tasks: z.record(z.string(), TaskCost),
    decode: z.record(z.string(), DecodeProfile),
    trainer: z.record(z.string(), TrainerProfile),
    /** CPU roles (env workers, rollout workers, controllers, feeder): vCPUs each and the instance priced per vCPU. */
    cpu: z
      .object({
        instance: z.string().min(1),
        envWorkerVcpus: z.number().positive(),
        rolloutWorkerVcpus: z.number().positive(),
        controllerVcpus: z.number().positive(),
        /** Episodes one rollout worker process runs at once. */
        rolloutSlotsPerWorker: z.number().int().min(1),
        source: Source,
      })
      .strict(),
    aws: z
      .object({
        region: z.string().min(1),
        date: z.string(),
        prices: z.record(z.string(), PriceEntry),
        requests: z
          .object({
            sqsPerMillion: z.number().min(0),
            s3PutPerThousand: z.number().min(0),
            s3GetPerThousand: z.number().min(0),
            source: Source,
          })
          .strict(),
        limits: z
          .object({
            s3PutPerPrefixPerS: Limit,
            s3GetPerPrefixPerS: Limit,
            sqsInFlightPerQueue: Limit,
            sqsApiPerS: Limit,
            fargateLaunchPerS: Limit,
            fargateLaunchBurst: Limit,
            secretsGetPerS: Limit,
          })
          .strict(),
      })
      .strict(),
  })
  .strict();
export type Calibration = z.infer<typeof Calibration>;

/** Parses a calibration file's JSON; errors name the failing field path. */
export function parseCalibration(raw: unknown, file: string): Calibration {
  const parsed = Calibration.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new RangeError(`${file}: ${issue?.path.join(".") || "(root)"}: ${issue?.message ?? "invalid"}`);
}
