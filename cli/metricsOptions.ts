import { type Command, InvalidArgumentError, Option } from "commander";
import { ValidationError } from "../shared/errors.ts";
import type { Logger } from "../shared/log.ts";
import { ServiceMetrics, serveMetrics } from "../shared/metrics.ts";

/**
 * `--metrics-port` / `--metrics-host` of the roles that serve no HTTP of their own (feeder,
 * rollout worker, trainer, env pool): a listener with only `GET /metrics`. Off unless a port is
 * given (or AGENTRL_METRICS_PORT, as ECS tasks set it); 0 picks a free port, printed on stdout.
 */
export function withMetricsOptions(command: Command): Command {
  return command
    .addOption(
      new Option("--metrics-port <port>", "serve Prometheus /metrics on this port (0: a free one; default: off)")
        .env("AGENTRL_METRICS_PORT")
        .argParser(metricsPort),
    )
    .addOption(
      new Option("--metrics-host <host>", "address of the /metrics listener")
        .env("AGENTRL_METRICS_HOST")
        .default("127.0.0.1"),
    );
}

function metricsPort(value: string): number {
  const port = Number(value);
  if (/^\d+$/.test(value) && port <= 65_535) return port;
  throw new InvalidArgumentError(`--metrics-port must be a port number 0..65535 (0 picks a free one), got "${value}"`);
}

/** What withMetricsOptions adds to a command's options. */
export interface MetricsCliOptions {
  readonly metricsPort?: number;
  readonly metricsHost?: string;
}

export interface RoleMetrics {
  readonly metrics: ServiceMetrics;
  close(): Promise<void>;
}

/**
 * Starts the role's /metrics listener when `--metrics-port` was given; undefined otherwise.
 * Prints `{"event":"metrics","role":...,"url":...}` so that a launcher (or a person) finds it.
 */
export async function startRoleMetrics(
  role: string,
  options: MetricsCliOptions,
  log: Logger,
): Promise<RoleMetrics | undefined> {
  if (options.metricsPort === undefined) return undefined;
  const metrics = ServiceMetrics.forRole(role);
  const server = await serveMetrics(metrics, {
    port: options.metricsPort,
    host: options.metricsHost ?? "127.0.0.1",
    log,
  });
  process.stdout.write(`${JSON.stringify({ event: "metrics", role, url: `${server.url}/metrics` })}\n`);
  return { metrics, close: () => server.close() };
}

/**
 * For the roles that serve /metrics on their own port (controller, env worker, policy server,
 * gateway): a second listener with only /metrics at AGENTRL_METRICS_PORT on AGENTRL_METRICS_HOST
 * (default 127.0.0.1), as ECS tasks set them, so a scraper gets a port of its own and the API port
 * stays open only to the API's callers. Undefined when AGENTRL_METRICS_PORT is unset.
 */
export async function serveMetricsFromEnv(
  metrics: ServiceMetrics,
  role: string,
  log: Logger,
  env: NodeJS.ProcessEnv = process.env,
): Promise<RoleMetrics | undefined> {
  const port = env.AGENTRL_METRICS_PORT;
  if (port === undefined || port === "") return undefined;
  let parsed: number;
  try {
    parsed = metricsPort(port);
  } catch {
    throw new ValidationError("environment", [
      { path: "AGENTRL_METRICS_PORT", message: `must be a port number 0..65535 (0 picks a free one), got "${port}"` },
    ]);
  }
  const server = await serveMetrics(metrics, { port: parsed, host: env.AGENTRL_METRICS_HOST || "127.0.0.1", log });
  process.stdout.write(`${JSON.stringify({ event: "metrics", role, url: `${server.url}/metrics` })}\n`);
  return { metrics, close: () => server.close() };
}
