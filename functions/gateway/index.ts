/** The gateway role: an OpenAI-compatible endpoint that records any agent's calls as trajectories. */
import { NoPolicyVersionError, newestCodec } from "../../shared/chat/checkpoint.ts";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { listen } from "../../shared/http.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import { PolicyClient } from "../../shared/policy/client.ts";
import { PolicyPool, type PoolUrls } from "../../shared/policy/pool.ts";
import type { Secrets } from "../../shared/security/secrets.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { createGateway, type Gateway } from "./app.ts";

export * from "./app.ts";
export * from "./export.ts";
export * from "./session.ts";

/** The gateway cannot start (no admin key, no policy version). */
export class GatewayStartError extends AgentRlError {
  override readonly name = "GatewayStartError";
}

export interface RunningGateway {
  readonly url: string;
  readonly gateway: Gateway;
  close(): Promise<void>;
}

/**
 * Starts the gateway on `gateway.host:gateway.port` against the experiment's transport and the
 * policy pool at `urls` (as a rollout worker would draw from it), sweeping idle sessions and
 * group timeouts every second. Refuses to start without AGENTRL_GATEWAY_ADMIN_KEY.
 * @example const gw = await startGateway(config, transport, { current: "http://127.0.0.1:8001/v1" }, readSecrets());
 */
export async function startGateway(
  config: ExperimentConfig,
  transport: Transport,
  urls: PoolUrls,
  secrets: Secrets,
  options: {
    readonly log?: Logger;
    readonly port?: number;
    readonly signal?: AbortSignal;
    readonly metrics?: ServiceMetrics;
  } = {},
): Promise<RunningGateway> {
  const log = options.log ?? createLogger({ role: "gateway", experimentId: config.experimentId });
  if (!secrets.gatewayAdminKey)
    throw new GatewayStartError(
      "AGENTRL_GATEWAY_ADMIN_KEY is not set: the gateway needs an admin key to open sessions (at least 16 printable characters)",
    );
  const codec = await newestCodec(transport.store("checkpoints"), undefined, options.signal).catch((error: unknown) => {
    throw error instanceof NoPolicyVersionError ? new GatewayStartError(error.message) : error;
  });
  let publicUrl = config.gateway.publicUrl ?? "";
  const gateway = createGateway({
    config,
    transport,
    codec,
    pool: new PolicyPool(config.rollout, {
      ...urls,
      ...(secrets.policyApiKey ? { apiKey: secrets.policyApiKey } : {}),
    }),
    policy: new PolicyClient(config.rollout.policyTimeoutSeconds * 1000),
    adminKey: secrets.gatewayAdminKey,
    publicUrl: () => publicUrl,
    log,
    ...(options.metrics ? { metrics: options.metrics } : {}),
  });
  const port = options.port ?? config.gateway.port ?? 0;
  const http = await listen(gateway.app, port, config.gateway.host, config.limits.http);
  if (!publicUrl) publicUrl = http.url;
  let sweeping = false;
  const timer = setInterval(() => {
    if (sweeping) return;
    sweeping = true;
    void gateway
      .sweep()
      .catch((error: unknown) => log.error({ err: error }, "gateway sweep failed"))
      .finally(() => {
        sweeping = false;
      });
  }, 1_000);
  log.info({ url: http.url, publicUrl }, "gateway listening");
  return {
    url: http.url,
    gateway,
    async close() {
      clearInterval(timer);
      await http.close();
    },
  };
}
