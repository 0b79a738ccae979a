import { type Command, InvalidArgumentError } from "commander";
import { configFromOptions, withConfigOptions } from "../options.ts";

/** `agentrl gateway`: the OpenAI-compatible gateway that records any agent's calls as trajectories. */
export function register(program: Command): void {
  withConfigOptions(
    program
      .command("gateway")
      .description(
        "serve sessions to your own agent: point its OpenAI base URL at a session and its calls train the policy (needs AGENTRL_GATEWAY_ADMIN_KEY)",
      ),
  )
    .requiredOption("--current-url <url>", "policy server following the newest version (OpenAI base URL)")
    .option("--stale-url <url>", "policy server following every K-th version (cross-policy pool)")
    .option("--port <port>", "port to listen on (default: gateway.port, else a free one)", portOption)
    .action(
      async (options: { config?: string; set?: string[]; currentUrl: string; staleUrl?: string; port?: number }) => {
        const config = await configFromOptions(options);
        const { createRoleTransport } = await import("../../shared/transport/index.ts");
        const { readSecrets } = await import("../../shared/security/secrets.ts");
        const { startGateway } = await import("../../functions/gateway/index.ts");
        const { ServiceMetrics } = await import("../../shared/metrics.ts");
        const { serveMetricsFromEnv } = await import("../metricsOptions.ts");
        const { createLogger } = await import("../../shared/log.ts");
        const secrets = readSecrets();
        const metrics = new ServiceMetrics("gateway", secrets.metricsToken);
        const transport = await createRoleTransport(config, "gateway");
        const stop = new AbortController();
        process.once("SIGINT", () => stop.abort());
        process.once("SIGTERM", () => stop.abort());
        try {
          const running = await startGateway(
            config,
            transport,
            { current: options.currentUrl, ...(options.staleUrl ? { stale: options.staleUrl } : {}) },
            secrets,
            {
              ...(options.port === undefined ? {} : { port: options.port }),
              signal: stop.signal,
              metrics,
            },
          );
          process.stdout.write(`${JSON.stringify({ event: "listening", role: "gateway", url: running.url })}\n`);
          const scrape = await serveMetricsFromEnv(metrics, "gateway", createLogger({ role: "gateway" }));
          stop.signal.addEventListener("abort", () => void scrape?.close(), { once: true });
          await new Promise<void>((resolve) => stop.signal.addEventListener("abort", () => resolve(), { once: true }));
          await running.close();
          process.stdout.write(
            `${JSON.stringify({ event: "stopped", role: "gateway", ...running.gateway.counters })}\n`,
          );
        } finally {
          await transport.close();
        }
      },
    );
}

function portOption(value: string): number {
  const port = Number(value);
  if (/^\d+$/.test(value) && port <= 65_535) return port;
  throw new InvalidArgumentError(`--port must be a port number 0..65535 (0 picks a free one), got "${value}"`);
}
