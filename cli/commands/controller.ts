import { type Command, InvalidArgumentError } from "commander";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { exitOnStopSignal } from "../stopSignals.ts";

/** `agentrl controller`: the AgentRL-compatible environment controller (default port 5020). */
export function register(program: Command): void {
  const controller = program
    .command("controller")
    .description("run the environment controller (AgentRL / AgentBench FC API under /api)")
    .option("--port <n>", "port to listen on (0 picks a free one)", intOption("--port", 0, 65535), 5020)
    .option("--host <host>", "interface to listen on", "127.0.0.1")
    .option(
      "--heartbeat-timeout-ms <n>",
      "a worker with an older heartbeat is COMA",
      intOption("--heartbeat-timeout-ms", 1),
      11_000,
    )
    .option("--session-idle-ms <n>", "cancel sessions idle for this long", intOption("--session-idle-ms", 1), 240_000)
    .option(
      "--worker-timeout-ms <n>",
      "timeout of start_sample/interact calls to workers",
      intOption("--worker-timeout-ms", 1),
      240_000,
    );
  withConfigOptions(controller).action(
    async (options: {
      port: number;
      host: string;
      heartbeatTimeoutMs: number;
      sessionIdleMs: number;
      workerTimeoutMs: number;
      config?: string;
      set?: string[];
    }) => {
      const { startController } = await import("../../functions/controller/controller.ts");
      const { readSecrets } = await import("../../shared/security/secrets.ts");
      // Body limit, timeouts and connection cap from the config's `limits.http`.
      const { limits } = await configFromOptions(options);
      const { ServiceMetrics } = await import("../../shared/metrics.ts");
      const { serveMetricsFromEnv } = await import("../metricsOptions.ts");
      const { createLogger } = await import("../../shared/log.ts");
      const metrics = ServiceMetrics.forRole("controller");
      const running = await startController({
        httpLimits: limits.http,
        metrics,
        ...readSecrets(),
        port: options.port,
        host: options.host,
        heartbeatTimeoutMs: options.heartbeatTimeoutMs,
        forgetAfterMs: Math.max(35_000, options.heartbeatTimeoutMs * 3),
        sessionIdleTimeoutMs: options.sessionIdleMs,
        workerTimeoutMs: options.workerTimeoutMs,
      });
      process.stdout.write(`${JSON.stringify({ event: "listening", role: "controller", url: running.url })}\n`);
      const log = createLogger({ role: "controller" });
      const scrape = await serveMetricsFromEnv(metrics, "controller", log);
      exitOnStopSignal(() => Promise.all([running.close(), scrape?.close()]), { log });
    },
  );
}

/** Commander parser for an integer option in [min, max]; failures name the option and the range. */
export function intOption(flag: string, min: number, max = Number.MAX_SAFE_INTEGER): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      const range = max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in [${min}, ${max}]`;
      throw new InvalidArgumentError(`${flag} must be ${range}, got "${value}"`);
    }
    return n;
  };
}

/** commander parser for an http(s) URL option, naming the flag when the value is not one. */
export function urlOption(flag: string): (value: string) => string {
  return (value: string) => {
    try {
      const url = new URL(value);
      if (url.protocol !== "http:" && url.protocol !== "https:") throw new Error("not http");
      return value;
    } catch {
      throw new InvalidArgumentError(`${flag} must be an http(s) URL, got "${value}"`);
    }
  };
}
