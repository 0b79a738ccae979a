import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { issuesOf, ValidationError } from "../errors.ts";
import { applyOverride, type ExperimentConfig, envOverrides, parseConfig } from "./index.ts";

/**
 * The typed environment of every container (ECS task) of a deployment. Infra writes these
 * variables (see infra/ constructs); a role reads them once at start-up with
 * {@link startContainer} instead of reading `process.env` ad hoc. A missing or malformed
 * variable stops the process with a message naming that variable.
 */

/** Roles a container can play; `AGENTRL_ROLE` picks one. */
export const CONTAINER_ROLES = [
  "controller",
  "env",
  "envpool",
  "policy",
  "trainer",
  "feeder",
  "rollout",
  "gateway",
  "sweep",
] as const;
export const ContainerRole = z.enum(CONTAINER_ROLES);
export type ContainerRole = z.infer<typeof ContainerRole>;

/** What ECS allows in a capacity provider's name (FARGATE and FARGATE_SPOT are two such names). */
export const CAPACITY_PROVIDER = /^[A-Za-z0-9_-]{1,255}$/;

const nonEmpty = z.string().trim().min(1, "must not be empty");
const httpUrl = z.url({ protocol: /^https?$/, error: "must be an http(s) URL" });
const port = z.coerce
  .number({ error: "must be a port number" })
  .int("must be an integer")
  .min(1, "must be 1..65535")
  .max(65_535, "must be 1..65535");
const s3Uri = z
  .string()
  .regex(/^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\/.+$/, "must look like s3://bucket/key")
  .transform((uri) => {
    const rest = uri.slice("s3://".length);
    const slash = rest.indexOf("/");
    return { bucket: rest.slice(0, slash), key: rest.slice(slash + 1) };
  });

/** Where the experiment config comes from: inline JSON (small configs) or an S3 object. */
const configSource = {
  /** The experiment config as JSON (or YAML) text; wins over AGENTRL_CONFIG_S3_URI when both are set. */
  AGENTRL_CONFIG_JSON: nonEmpty.optional(),
  /** `s3://bucket/key` of the experiment config (for configs too big for a task definition). */
  AGENTRL_CONFIG_S3_URI: s3Uri.optional(),
};

/** Resource names every pipeline role needs (they override the config's transport section). */
const resources = {
  /** Prefix of the SQS queues: `<prefix>-rollout-requests`, `-trajectories`, `-policy-events`. */
  AGENTRL_QUEUE_PREFIX: z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, "1-40 letters, digits, '-' or '_'"),
  AGENTRL_TRAJECTORY_BUCKET: nonEmpty,
  AGENTRL_CHECKPOINT_BUCKET: nonEmpty,
  /** Set by ECS on every task; falls back to the config's region when absent. */
  AWS_REGION: nonEmpty.optional(),
  /** AWS-API endpoint override (LocalStack, moto); unset in AWS. */
  AGENTRL_AWS_ENDPOINT: httpUrl.optional(),
};

/** Interface servers bind to; tasks need 0.0.0.0 (their ENI), local runs and tests 127.0.0.1. */
const host = z.string().trim().min(1, "must not be empty").default("0.0.0.0");

/**
 * Prometheus /metrics of every role on a port of its own (ECS tasks set both; the scrape token
 * comes as the AGENTRL_METRICS_TOKEN secret). Unset: no listener beyond a role's own port.
 */
const metricsListener = {
  AGENTRL_METRICS_PORT: port.optional(),
  AGENTRL_METRICS_HOST: nonEmpty.optional(),
};

const pipelineRole = <R extends ContainerRole, S extends z.ZodRawShape>(role: R, shape: S) =>
  z.object({ AGENTRL_ROLE: z.literal(role), ...configSource, ...resources, ...metricsListener, ...shape });

/** One variant per role; zod reports failures at the variable's name. */
export const ContainerEnv = z.discriminatedUnion(
  "AGENTRL_ROLE",
  [
    pipelineRole("controller", { AGENTRL_PORT: port.default(5020), AGENTRL_HOST: host }),
    pipelineRole("env", {
      /** Task this worker serves; must be in the config's task mix. */
      AGENTRL_TASK: nonEmpty,
      AGENTRL_CONTROLLER_URL: httpUrl,
      AGENTRL_PORT: port.default(5021),
      AGENTRL_HOST: host,
      /** Host the controller calls this worker back at. @default the task's own IPv4 address (its ENI in awsvpc mode) */
      AGENTRL_ADVERTISE_HOST: nonEmpty.optional(),
      /** MySQL server of the dbbench tasks (the task's sidecar); its password comes as AGENTRL_MYSQL_PASSWORD. */
      AGENTRL_MYSQL_URL: z
        .string()
        .regex(/^mysql:\/\//, "must be a mysql:// URL")
        .optional(),
      /** Image of AgentBench's `default` OS subtype (the os-* tasks). @default the local stand-in */
      AGENTRL_OS_IMAGE_DEFAULT: nonEmpty.optional(),
      /** Image of AgentBench's `packages` OS subtype (the os-* tasks). @default the local stand-in */
      AGENTRL_OS_IMAGE_PACKAGES: nonEmpty.optional(),
    }),
    pipelineRole("envpool", {
      /** Task whose workers this pool manages; must be in the config's task mix. */
      AGENTRL_TASK: nonEmpty,
      AGENTRL_CONTROLLER_URL: httpUrl,
      AGENTRL_ECS_CLUSTER: nonEmpty,
      /** The env task definition of this task (family or ARN) the pool runs with RunTask. */
      AGENTRL_ENV_TASK_DEFINITION: nonEmpty,
      /** Comma-separated subnet ids of the env tasks. */
      AGENTRL_ENV_SUBNETS: nonEmpty,
      /** Comma-separated security group ids of the env tasks. */
      AGENTRL_ENV_SECURITY_GROUPS: nonEmpty,
      /**
       * FARGATE, FARGATE_SPOT, or the name of one of the cluster's EC2 capacity providers (the OS
       * tasks' sandbox hosts, whose workers start episode containers on the host's Docker).
       */
      AGENTRL_ENV_CAPACITY_PROVIDER: z
        .string()
        .regex(
          CAPACITY_PROVIDER,
          "must be FARGATE, FARGATE_SPOT or a capacity provider name (1-255 letters, digits, '-' or '_')",
        )
        .default("FARGATE"),
    }),
    pipelineRole("policy", {
      AGENTRL_POLICY_POOL: z.enum(["current", "stale"], { error: "must be current or stale" }),
      AGENTRL_PORT: port.default(8000),
      AGENTRL_HOST: host,
    }),
    pipelineRole("trainer", {}),
    pipelineRole("feeder", {}),
    pipelineRole("rollout", {
      AGENTRL_CONTROLLER_URL: httpUrl,
      AGENTRL_POLICY_CURRENT_URL: httpUrl,
      AGENTRL_POLICY_STALE_URL: httpUrl,
    }),
    pipelineRole("gateway", {
      AGENTRL_POLICY_CURRENT_URL: httpUrl,
      AGENTRL_POLICY_STALE_URL: httpUrl.optional(),
      AGENTRL_PORT: port.default(8080),
      AGENTRL_HOST: host,
    }),
    z.object({
      AGENTRL_ROLE: z.literal("sweep"),
      /** The sweep spec (see shared/config/sweep.ts) as JSON. */
      AGENTRL_SWEEP_JSON: nonEmpty,
      /** Bucket that receives each grid point's run folder under `sweeps/<name>/<point>/`. */
      AGENTRL_RESULTS_BUCKET: nonEmpty.optional(),
      AWS_REGION: nonEmpty.optional(),
      AGENTRL_AWS_ENDPOINT: httpUrl.optional(),
    }),
  ],
  { error: `must be one of ${CONTAINER_ROLES.join(", ")}` },
);
export type ContainerEnv = z.infer<typeof ContainerEnv>;
/** What infra writes: every variable as a string (defaults may be left out). */
export type ContainerEnvInput = z.input<typeof ContainerEnv>;
/** The variant of one role, e.g. `ContainerEnvOf<"env">` has `AGENTRL_TASK`. */
export type ContainerEnvOf<R extends ContainerRole> = Extract<ContainerEnv, { AGENTRL_ROLE: R }>;
/** Variables infra sets for one role (all strings). */
export type ContainerEnvInputOf<R extends ContainerRole> = Extract<ContainerEnvInput, { AGENTRL_ROLE: R }>;

/**
 * Parses the container environment, throwing a ValidationError whose message names every
 * missing or bad variable (`AGENTRL_CONTROLLER_URL: must be an http(s) URL`).
 * @example const env = parseContainerEnv(process.env, "env"); env.AGENTRL_TASK
 */
export function parseContainerEnv<R extends ContainerRole>(env: NodeJS.ProcessEnv, expectedRole: R): ContainerEnvOf<R>;
export function parseContainerEnv(env?: NodeJS.ProcessEnv): ContainerEnv;
export function parseContainerEnv(env: NodeJS.ProcessEnv = process.env, expectedRole?: ContainerRole): ContainerEnv {
  if (expectedRole !== undefined && env.AGENTRL_ROLE !== expectedRole)
    throw new ValidationError("container environment", [
      {
        path: "AGENTRL_ROLE",
        message: `is ${env.AGENTRL_ROLE === undefined ? "not set" : `"${env.AGENTRL_ROLE}"`}; this process is the ${expectedRole} role`,
      },
    ]);
  const result = ContainerEnv.safeParse(env);
  if (!result.success) throw new ValidationError("container environment", issuesOf(result.error));
  return result.data;
}

/** Reads an S3 object as text; injectable so tests and LocalStack runs can substitute it. */
export type ReadS3Text = (location: { bucket: string; key: string }, env: ContainerEnv) => Promise<string>;

const readS3TextWithSdk: ReadS3Text = async ({ bucket, key }, env) => {
  // Imported lazily: only containers whose config lives in S3 load the SDK.
  const { S3Client, GetObjectCommand } = await import("@aws-sdk/client-s3");
  const endpoint = env.AGENTRL_AWS_ENDPOINT;
  const client = new S3Client({
    ...(env.AWS_REGION ? { region: env.AWS_REGION } : {}),
    ...(endpoint ? { endpoint, forcePathStyle: true } : {}),
  });
  try {
    const object = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    return (await object.Body?.transformToString("utf8")) ?? "";
  } finally {
    client.destroy();
  }
};

function parseConfigText(text: string, variable: string): Record<string, unknown> {
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new ValidationError("container environment", [
      { path: variable, message: `is not valid JSON/YAML (${(error as Error).message})` },
    ]);
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw new ValidationError("container environment", [{ path: variable, message: "must hold a JSON object" }]);
  return raw as Record<string, unknown>;
}

/**
 * Resolves the experiment config of a pipeline container: the config from AGENTRL_CONFIG_JSON or
 * AGENTRL_CONFIG_S3_URI (defaults when neither is set), then the deployment's resource names
 * (transport kind `aws`, queue prefix, bucket names, region, endpoint), then `AGENTRL__a__b=v`
 * overrides from `rawEnv`, validated with parseConfig.
 */
export async function resolveContainerConfig(
  env: Exclude<ContainerEnv, { AGENTRL_ROLE: "sweep" }>,
  options: { readS3Text?: ReadS3Text; rawEnv?: NodeJS.ProcessEnv } = {},
): Promise<ExperimentConfig> {
  let raw: Record<string, unknown> = {};
  if (env.AGENTRL_CONFIG_JSON !== undefined) raw = parseConfigText(env.AGENTRL_CONFIG_JSON, "AGENTRL_CONFIG_JSON");
  else if (env.AGENTRL_CONFIG_S3_URI !== undefined)
    raw = parseConfigText(
      await (options.readS3Text ?? readS3TextWithSdk)(env.AGENTRL_CONFIG_S3_URI, env),
      "AGENTRL_CONFIG_S3_URI",
    );
  const transport = typeof raw.transport === "object" && raw.transport !== null ? raw.transport : {};
  raw.transport = {
    ...transport,
    kind: "aws",
    queuePrefix: env.AGENTRL_QUEUE_PREFIX,
    trajectoryBucket: env.AGENTRL_TRAJECTORY_BUCKET,
    checkpointBucket: env.AGENTRL_CHECKPOINT_BUCKET,
    ...(env.AWS_REGION ? { region: env.AWS_REGION } : {}),
    ...(env.AGENTRL_AWS_ENDPOINT ? { endpoint: env.AGENTRL_AWS_ENDPOINT } : {}),
  };
  if (env.AGENTRL_ROLE === "env" || env.AGENTRL_ROLE === "envpool" || env.AGENTRL_ROLE === "rollout") {
    const tasks = typeof raw.tasks === "object" && raw.tasks !== null ? raw.tasks : {};
    raw.tasks = { ...tasks, controllerUrl: env.AGENTRL_CONTROLLER_URL };
  }
  for (const assignment of envOverrides(options.rawEnv ?? {})) applyOverride(raw, assignment);
  const config = parseConfig(raw);
  if (
    (env.AGENTRL_ROLE === "env" || env.AGENTRL_ROLE === "envpool") &&
    !config.tasks.mix.some((entry) => entry.name === env.AGENTRL_TASK)
  )
    throw new ValidationError("container environment", [
      {
        path: "AGENTRL_TASK",
        message: `"${env.AGENTRL_TASK}" is not in the config's task mix (${config.tasks.mix.map((e) => e.name).join(", ")})`,
      },
    ]);
  return config;
}

/** What a pipeline role gets at start-up: its typed environment and its resolved experiment config. */
export interface ContainerStart<R extends Exclude<ContainerRole, "sweep">> {
  readonly env: ContainerEnvOf<R>;
  readonly config: ExperimentConfig;
}

/**
 * The call a role makes first thing when it runs in a container: validates the environment for
 * `role` and resolves the experiment config. Throws ValidationError naming the bad variable.
 * @example const { env, config } = await startContainer("rollout"); env.AGENTRL_POLICY_CURRENT_URL
 */
export async function startContainer<R extends Exclude<ContainerRole, "sweep">>(
  role: R,
  rawEnv: NodeJS.ProcessEnv = process.env,
  options: { readS3Text?: ReadS3Text } = {},
): Promise<ContainerStart<R>> {
  const env = parseContainerEnv(rawEnv, role);
  const config = await resolveContainerConfig(env as Exclude<ContainerEnv, { AGENTRL_ROLE: "sweep" }>, {
    ...options,
    rawEnv,
  });
  return { env, config };
}

/** True when this process was started as a container (AGENTRL_ROLE is set). */
export function inContainer(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.AGENTRL_ROLE !== undefined;
}
