import { type Command, InvalidArgumentError } from "commander";
import { createLogger } from "../../shared/log.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { intOption } from "./controller.ts";

/** `agentrl policy serve`: the OpenAI-compatible policy server following the checkpoint store. */
export function register(program: Command): void {
  const policy = program.command("policy").description("policy server (OpenAI-compatible, continuous batching)");
  withConfigOptions(
    policy
      .command("serve")
      .description("serve the policy over POST /v1/chat/completions, following the checkpoint store")
      .option("--pool <pool>", "current: every new version; stale: every K-th version", poolOption, "current")
      .option(
        "--stale-every <k>",
        "versions between stale-pool updates (default: rollout.crossPolicy.staleEvery)",
        intOption("--stale-every", 1),
      )
      .option("--pin", "serve the starting version (policy.init) only; do not follow the checkpoint store")
      .option("--port <n>", "port to listen on (0 picks a free one)", intOption("--port", 0, 65535), 8000)
      .option("--host <host>", "interface to listen on", "127.0.0.1"),
  ).action(
    async (options: {
      pool: "current" | "stale";
      staleEvery?: number;
      pin?: boolean;
      port: number;
      host: string;
      config?: string;
      set?: string[];
    }) => {
      const config = await configFromOptions(options);
      const log = createLogger({ role: `policy-${options.pool}`, experimentId: config.experimentId });
      const { servePolicy } = await import("../../trainer-image/policy-server/serve.ts");
      const { readSecrets } = await import("../../shared/security/secrets.ts");
      const { policyApiKey } = readSecrets();
      const running = await servePolicy({
        config,
        pool: options.pool,
        staleEvery: options.staleEvery,
        follow: !options.pin,
        port: options.port,
        host: options.host,
        log,
        ...(policyApiKey ? { apiKey: policyApiKey } : {}),
      });
      process.stdout.write(
        `${JSON.stringify({ event: "listening", role: `policy-${options.pool}`, url: running.url, policyVersion: running.version() })}\n`,
      );
      const stop = () => void running.close().then(() => process.exit(0));
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
    },
  );
}

function poolOption(value: string): "current" | "stale" {
  if (value === "current" || value === "stale") return value;
  throw new InvalidArgumentError(`--pool must be "current" or "stale", got "${value}"`);
}
