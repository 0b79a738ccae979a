import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { type Command, InvalidArgumentError } from "commander";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { ValidationError } from "../../shared/errors.ts";
import { createLogger } from "../../shared/log.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { exitOnStopSignal } from "../stopSignals.ts";
import { intOption } from "./controller.ts";
import { registerHfCommands } from "./policy-hf.ts";
import { registerMemoryCommand } from "./policy-memory.ts";

/** `agentrl policy serve`: the OpenAI-compatible policy server following the checkpoint store. */
export function register(program: Command): void {
  const policy = program
    .command("policy")
    .description("policy server (OpenAI-compatible, continuous batching); publishing a checkpoint into a store");
  registerPublish(policy);
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
      .option(
        "--pin [checkpoint]",
        "serve one version only, never following the store: a checkpoint folder (its newest version) or a version number of the store (default: policy.init)",
      )
      .option("--port <n>", "port to listen on (0 picks a free one)", intOption("--port", 0, 65535), 8000)
      .option("--host <host>", "interface to listen on", "127.0.0.1"),
  ).action(
    async (options: {
      pool: "current" | "stale";
      staleEvery?: number;
      pin?: boolean | string;
      port: number;
      host: string;
      config?: string;
      set?: string[];
    }) => {
      const pinned = typeof options.pin === "string" ? pinnedInit(options.pin) : undefined;
      const config = await configFromOptions({
        ...options,
        set: [...(options.set ?? []), ...(pinned ? [pinned] : [])],
      });
      // A pinned version must be in the store before anything says it is served.
      if (typeof options.pin === "string" && /^\d+$/.test(options.pin))
        await assertPublished(config, Number(options.pin));
      const log = createLogger({ role: `policy-${options.pool}`, experimentId: config.experimentId });
      const { servePolicy } = await import("../../trainer-image/policy-server/serve.ts");
      const { readSecrets } = await import("../../shared/security/secrets.ts");
      const { ServiceMetrics } = await import("../../shared/metrics.ts");
      const { serveMetricsFromEnv } = await import("../metricsOptions.ts");
      const metrics = ServiceMetrics.forRole(`policy-${options.pool}`);
      const { policyApiKey } = readSecrets();
      const running = await servePolicy({
        config,
        pool: options.pool,
        staleEvery: options.staleEvery,
        follow: options.pin === undefined || options.pin === false,
        port: options.port,
        host: options.host,
        log,
        ...(policyApiKey ? { apiKey: policyApiKey } : {}),
        metrics,
      });
      process.stdout.write(
        `${JSON.stringify({ event: "listening", role: `policy-${options.pool}`, url: running.url, policyVersion: running.version() })}\n`,
      );
      const scrape = await serveMetricsFromEnv(metrics, `policy-${options.pool}`, log);
      exitOnStopSignal(() => Promise.all([running.close(), scrape?.close()]), { log });
    },
  );
  registerHfCommands(policy);
  registerMemoryCommand(policy);
}

/** `--pin <folder|version>` as a policy.init override; a bad value names the option and what is allowed. */
function registerPublish(policy: Command): void {
  withConfigOptions(
    policy
      .command("publish")
      .description(
        "publish a checkpoint folder's version (default v0) into the experiment's checkpoint store; " +
          "idempotent: a version already there is left as it is",
      )
      .requiredOption("--from <dir>", "checkpoint folder holding policies/vN/ (e.g. trainer-image/base-policy)")
      .option("--version <n>", "version to publish", intOption("--version", 0), 0)
      .option(
        "--bucket <name>",
        "the deployed checkpoint bucket (stack output CheckpointBucketName); implies --transport aws",
      )
      .option("--endpoint <url>", "AWS-API endpoint (LocalStack, moto); implies --transport aws"),
  ).action(
    async (options: {
      from: string;
      version: number;
      bucket?: string;
      endpoint?: string;
      config?: string;
      set?: string[];
    }) => {
      const from = resolve(options.from);
      if (!existsSync(from) || !statSync(from).isDirectory())
        throw new ValidationError("options", [{ path: "--from", message: `${options.from} is not a folder` }]);
      const aws = options.bucket !== undefined || options.endpoint !== undefined;
      const overrides = [
        ...(aws ? ["transport.kind=aws"] : []),
        ...(options.bucket ? [`transport.checkpointBucket=${options.bucket}`] : []),
        ...(options.endpoint ? [`transport.endpoint=${options.endpoint}`] : []),
      ];
      const config = await configFromOptions({ ...options, set: [...(options.set ?? []), ...overrides] });
      const { createTransport } = await import("../../shared/transport/index.ts");
      const { LocalObjectStore } = await import("../../shared/transport/local.ts");
      const { copyVersion, readManifest } = await import("../../shared/protocol/checkpoints.ts");
      const source = new LocalObjectStore(from);
      await readManifest(source, options.version).catch((error: unknown) => {
        throw new ValidationError("options", [
          {
            path: "--from",
            message: `${options.from} has no valid version ${options.version}: ${(error as Error).message}`,
          },
        ]);
      });
      // The deployment owns the bucket: publishing never creates one.
      const transport = await createTransport(config.transport, { ensureResources: false });
      try {
        const outcome = await copyVersion(source, transport.store("checkpoints"), options.version);
        const store =
          config.transport.kind === "aws" ? `s3://${config.transport.checkpointBucket}/` : config.transport.localDir;
        process.stdout.write(
          `${JSON.stringify({ event: outcome === "copied" ? "published" : "already-published", version: options.version, from, store })}\n`,
        );
      } finally {
        await transport.close();
      }
    },
  );
}

function pinnedInit(value: string): string {
  if (/^\d+$/.test(value) || (existsSync(value) && statSync(value).isDirectory())) return `policy.init=${value}`;
  throw new ValidationError("options", [
    {
      path: "--pin",
      message: `"${value}" is neither a version number nor an existing checkpoint folder (a folder holding policies/vN/)`,
    },
  ]);
}

/** `--pin N` names a version of the experiment's checkpoint store; say which versions it holds when N is not one. */
async function assertPublished(config: ExperimentConfig, version: number): Promise<void> {
  const { createTransport } = await import("../../shared/transport/index.ts");
  const { listVersions, readManifest } = await import("../../shared/protocol/checkpoints.ts");
  const transport = await createTransport(config.transport);
  try {
    const store = transport.store("checkpoints");
    const ok = await readManifest(store, version).then(
      () => true,
      () => false,
    );
    if (ok) return;
    const versions = await listVersions(store);
    const where =
      config.transport.kind === "local" ? config.transport.localDir : `s3://${config.transport.checkpointBucket}`;
    throw new ValidationError("options", [
      {
        path: "--pin",
        message: `version ${version} is not published in the checkpoint store ${where} (${versions.length ? `it holds ${versions.map((v) => `v${v}`).join(", ")}` : "it is empty"}); give a published version or a checkpoint folder`,
      },
    ]);
  } finally {
    await transport.close();
  }
}

function poolOption(value: string): "current" | "stale" {
  if (value === "current" || value === "stale") return value;
  throw new InvalidArgumentError(`--pool must be "current" or "stale", got "${value}"`);
}
