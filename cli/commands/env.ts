import { type Command, InvalidArgumentError } from "commander";
import { AgentRlError } from "../../shared/errors.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { exitOnStopSignal } from "../stopSignals.ts";
import { intOption, urlOption } from "./controller.ts";
import { registerPool } from "./envPool.ts";

/** `agentrl env serve|check`: run a task worker, or check a task with its scripted agents. */
export function register(program: Command): void {
  const env = program.command("env").description("environment task workers");

  const serve = env
    .command("serve")
    .description("serve one task as an AgentRL task worker that registers with the controller")
    .argument("<task>", "task name from env-images/registry.ts")
    .requiredOption("--controller <url>", "controller URL, e.g. http://127.0.0.1:5020", urlOption("--controller"))
    .option("--port <n>", "port to listen on (0 picks a free one)", intOption("--port", 0, 65535), 0)
    .option("--host <host>", "interface to listen on", "127.0.0.1")
    .option(
      "--address <url>",
      "address announced to the controller (default http://<host>:<port>/api)",
      urlOption("--address"),
    )
    .option(
      "--concurrency <n>",
      "sessions served at once, more answer 406 (default: the config's tasks.mix[].concurrency for this task, else 32)",
      intOption("--concurrency", 1),
    )
    .option("--idle-timeout-ms <n>", "cancel sessions idle for this long", intOption("--idle-timeout-ms", 1), 240_000)
    .option("--heartbeat-ms <n>", "heartbeat period", intOption("--heartbeat-ms", 10), 8_000)
    .option("--max-episodes <n>", "drain after starting this many sessions", intOption("--max-episodes", 1))
    .option("--max-age <s>", "drain after this many seconds", intOption("--max-age", 1));

  withConfigOptions(serve).action(
    async (
      name: string,
      options: {
        controller: string;
        port: number;
        host: string;
        address?: string;
        concurrency?: number;
        idleTimeoutMs: number;
        heartbeatMs: number;
        maxEpisodes?: number;
        maxAge?: number;
        config?: string;
        set?: string[];
      },
    ) => {
      const module = await loadTask(name);
      const concurrency = options.concurrency ?? (await concurrencyOf(name, options));
      // The worker's HTTP limits and per-turn limits come from the config's `limits` section.
      const { limits } = await configFromOptions(options);
      const { serveTask } = await import("../../shared/env/worker.ts");
      const { readSecrets } = await import("../../shared/security/secrets.ts");
      const { ServiceMetrics } = await import("../../shared/metrics.ts");
      const { serveMetricsFromEnv } = await import("../metricsOptions.ts");
      const { createLogger } = await import("../../shared/log.ts");
      const metrics = ServiceMetrics.forRole(`env-${name}`);
      const { envSecret } = readSecrets();
      const worker = await serveTask(module, {
        ...(envSecret ? { envSecret } : {}),
        port: options.port,
        host: options.host,
        controllerUrl: options.controller,
        concurrency,
        idleTimeoutMs: options.idleTimeoutMs,
        heartbeatMs: options.heartbeatMs,
        address: options.address,
        limits: {
          ...(options.maxEpisodes !== undefined ? { maxEpisodes: options.maxEpisodes } : {}),
          ...(options.maxAge !== undefined ? { maxAgeMs: options.maxAge * 1000 } : {}),
        },
        httpLimits: limits.http,
        episodeLimits: limits.env,
        metrics,
      });
      process.stdout.write(
        `${JSON.stringify({ event: "listening", role: "env-worker", task: name, url: worker.url, address: worker.address })}\n`,
      );
      const log = createLogger({ role: `env-${name}` });
      const scrape = await serveMetricsFromEnv(metrics, `env-${name}`, log);
      exitOnStopSignal(() => Promise.all([worker.close(), scrape?.close()]), { log });
    },
  );

  registerPool(env);

  const check = env
    .command("check")
    .description("run the task's expert and random agents over the first N indices of a split")
    .argument("<task>", "task name from env-images/registry.ts")
    .option("--split <split>", "train or test", splitOption, "test")
    .option("--n <n>", "number of indices (from the start of the split)", intOption("--n", 1), 20);
  withConfigOptions(check).action(
    async (name: string, options: { split: "train" | "test"; n: number; config?: string; set?: string[] }) => {
      // Read for tasks.agentbench.dir (the AgentBench tasks' data folder).
      if (options.config || options.set?.length) await configFromOptions(options);
      const module = await loadTask(name);
      const { runnableIndices, scriptedStats } = await import("../../shared/env/session.ts");
      const range = module.task.splits[options.split];
      const first = Array.from({ length: Math.min(options.n, range.end - range.start) }, (_, i) => range.start + i);
      const { indices, skipped } = runnableIndices(module.task, first);
      const count = indices.length;
      const lines: string[] = [];
      for (const [why, which] of skipped)
        lines.push(`${name}: skipped ${which.length} of ${first.length} (${which.join(", ")}): ${why}`);
      let failed = false;
      for (const agent of [module.expert, module.random]) {
        const stats = await scriptedStats(module.task, agent, indices);
        if (agent === module.expert && count > 0 && stats.successes === 0) failed = true;
        lines.push(
          `${name} ${options.split}[${range.start}..${range.start + first.length}) ${agent.name}: success ${(100 * stats.successRate).toFixed(1)}% ` +
            `(${stats.successes}/${count}), avg reward ${stats.meanReward.toFixed(3)}, avg turns ${stats.meanTurns.toFixed(2)}, ` +
            `statuses ${JSON.stringify(stats.statuses)}`,
        );
        // Every instance the expert misses is a finding about the task: list each one.
        if (agent === module.expert)
          for (const miss of stats.misses) {
            const kind = module.task.categoryOf?.(miss.index);
            const seen = miss.lastObservations.map((o) => o.replace(/\s+/g, " ").slice(0, 160)).join(" → ");
            lines.push(
              `  expert miss: index ${miss.index}${kind ? ` (${kind})` : ""}: ${miss.status}, reward ${miss.reward}; it read: ${seen}`,
            );
          }
      }
      await module.task.close?.();
      process.stdout.write(`${lines.join("\n")}\n`);
      if (failed) throw new AgentRlError(`the expert agent of ${name} solved none of the ${count} instances`);
    },
  );
}

async function loadTask(name: string) {
  const { TASK_MODULES } = await import("../../env-images/registry.ts");
  const load = TASK_MODULES[name];
  if (!load)
    throw new AgentRlError(
      `unknown task "${name}"; available: ${Object.keys(TASK_MODULES).sort().join(", ") || "none"}`,
    );
  return load();
}

function splitOption(value: string): "train" | "test" {
  if (value !== "train" && value !== "test")
    throw new InvalidArgumentError(`--split must be train or test, got "${value}"`);
  return value;
}

/** Sessions per worker from the experiment config's task mix (what infra and the launcher deploy). */
export async function concurrencyOf(task: string, options: { config?: string; set?: string[] }): Promise<number> {
  if (!options.config && !options.set?.length) return 32;
  const config = await configFromOptions(options);
  const entry = config.tasks.mix.find((t) => t.name === task);
  // An AgentRlError, not commander's InvalidArgumentError: thrown from an action, the latter
  // ends the process with no message.
  if (!entry)
    throw new AgentRlError(
      `task "${task}" is not in the config's tasks.mix (${config.tasks.mix.map((t) => t.name).join(", ")}); add it or pass --concurrency`,
    );
  return entry.concurrency;
}
