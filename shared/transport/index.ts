/**
 * Entry point of the transports: `createTransport(config)` picks the embedded (`local`) or the
 * SQS/S3 (`aws`) implementation; both honour the same contracts (see types.ts).
 */
import type { ContainerRole } from "../config/containerEnv.ts";
import { accessFeaturesOf, forFeatures, ROLE_ACCESS } from "../config/roleAccess.ts";
import type { TransportConfig } from "../config/transport.ts";
import { restrictTransport } from "./restricted.ts";
import type { Transport } from "./types.ts";

export * from "./errors.ts";
export { RoleAccessError, restrictTransport } from "./restricted.ts";
export * from "./types.ts";
export { QUEUE_LIMITS } from "./validate.ts";

/** Options of createTransport beyond the experiment config. */
export interface CreateTransportOptions {
  /**
   * aws only: create missing queues (with DLQ + redrive) and buckets first.
   * @default true when `config.endpoint` is set (moto, LocalStack), false for real AWS (the CDK stack owns them)
   */
  readonly ensureResources?: boolean;
  /** Hears why the endpoint is being waited for, once, while creating resources (see ensureResources). */
  readonly onEndpointWait?: (reason: string) => void;
  /** Ends that wait (a stop during start-up). */
  readonly signal?: AbortSignal;
}

/**
 * Opens the transport the config names. Implementations load lazily, so the embedded default
 * never loads the AWS SDK and the aws transport never opens SQLite.
 * @example
 * const transport = await createTransport(config.transport);
 * await transport.queue("rollout-requests").send(JSON.stringify(request));
 */
export async function createTransport(
  config: TransportConfig,
  options: CreateTransportOptions = {},
): Promise<Transport> {
  if (config.kind === "local") {
    const { LocalTransport } = await import("./local.ts");
    return new LocalTransport(config);
  }
  const { AwsTransport } = await import("./aws.ts");
  const transport = new AwsTransport(config);
  if (options.ensureResources ?? config.endpoint !== undefined)
    await transport.ensureResources({
      ...(options.onEndpointWait ? { onWait: options.onEndpointWait } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
  return transport;
}

/**
 * The transport of one pipeline role: `createTransport` seen through the role's row of the
 * role-access table (shared/config/roleAccess.ts), less the rows of features this experiment does
 * not use, so touching anything else fails here as IAM would fail it in AWS (infra grants the same
 * rows). Roles never create resources: the orchestrator (`agentrl train`) or the deployed stacks
 * own them.
 * @example const transport = await createRoleTransport(config, "feeder");
 */
export async function createRoleTransport(
  config: {
    readonly transport: TransportConfig;
    readonly policy: { readonly syncEngines: readonly unknown[] };
    readonly rollout: { readonly versionSource: string };
  },
  role: ContainerRole,
): Promise<Transport> {
  const access = forFeatures(ROLE_ACCESS[role], accessFeaturesOf(config));
  return restrictTransport(await createTransport(config.transport, { ensureResources: false }), role, { access });
}
