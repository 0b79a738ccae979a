import { rmSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import {
  type ContainerEnv,
  parseContainerEnv,
  type ReadS3Text,
  resolveContainerConfig,
} from "../../shared/config/containerEnv.ts";
import { exitOnSignalUntilHandled } from "../stopSignals.ts";

/** First non-internal IPv4 address: in ECS awsvpc mode, the task's own ENI address. */
export function taskAddress(): string {
  for (const addresses of Object.values(networkInterfaces()))
    for (const address of addresses ?? []) if (address.family === "IPv4" && !address.internal) return address.address;
  return "127.0.0.1";
}

/**
 * The `agentrl` arguments that start the role named by the container environment. `configFile`
 * holds the resolved experiment config (resource names applied); `sweepFile` the sweep spec.
 * @example roleArgv(parseContainerEnv(), { configFile: "/tmp/c.json", sweepFile: "" })
 */
export function roleArgv(env: ContainerEnv, files: { configFile: string; sweepFile: string }): string[] {
  const config = ["--config", files.configFile];
  switch (env.AGENTRL_ROLE) {
    case "controller":
      return ["controller", "--host", env.AGENTRL_HOST, "--port", String(env.AGENTRL_PORT)];
    case "env":
      return [
        "env",
        "serve",
        env.AGENTRL_TASK,
        // sessions per worker: the config's tasks.mix[].concurrency for this task
        ...config,
        "--controller",
        env.AGENTRL_CONTROLLER_URL,
        "--host",
        env.AGENTRL_HOST,
        "--port",
        String(env.AGENTRL_PORT),
        // The controller calls the worker back at its own address, not at the bind address.
        "--address",
        `http://${env.AGENTRL_ADVERTISE_HOST ?? taskAddress()}:${env.AGENTRL_PORT}/api`,
      ];
    case "envpool":
      return [
        "env",
        "pool",
        "--controller",
        env.AGENTRL_CONTROLLER_URL,
        "--task",
        env.AGENTRL_TASK,
        "--driver",
        "ecs",
        ...config,
        "--ecs-cluster",
        env.AGENTRL_ECS_CLUSTER,
        "--ecs-task-definition",
        env.AGENTRL_ENV_TASK_DEFINITION,
        "--ecs-subnets",
        env.AGENTRL_ENV_SUBNETS,
        "--ecs-security-groups",
        env.AGENTRL_ENV_SECURITY_GROUPS,
        "--ecs-capacity-provider",
        env.AGENTRL_ENV_CAPACITY_PROVIDER,
      ];
    case "policy":
      return [
        "policy",
        "serve",
        "--pool",
        env.AGENTRL_POLICY_POOL,
        "--host",
        env.AGENTRL_HOST,
        "--port",
        String(env.AGENTRL_PORT),
        ...config,
      ];
    case "trainer":
      return ["trainer", ...config];
    case "feeder":
      return ["feeder", ...config];
    case "rollout":
      return [
        "rollout",
        ...config,
        "--controller-url",
        env.AGENTRL_CONTROLLER_URL,
        "--current-url",
        env.AGENTRL_POLICY_CURRENT_URL,
        "--stale-url",
        env.AGENTRL_POLICY_STALE_URL,
      ];
    case "gateway":
      return [
        "gateway",
        ...config,
        "--current-url",
        env.AGENTRL_POLICY_CURRENT_URL,
        ...(env.AGENTRL_POLICY_STALE_URL ? ["--stale-url", env.AGENTRL_POLICY_STALE_URL] : []),
        "--set",
        `gateway.host=${env.AGENTRL_HOST}`,
        "--port",
        String(env.AGENTRL_PORT),
      ];
    case "sweep":
      return ["sweep", files.sweepFile];
  }
}

/**
 * Validates the container environment and writes the resolved experiment config (or the sweep
 * spec) to a temp folder; returns the `agentrl` arguments that start the role, and that folder.
 */
export async function prepareContainer(
  rawEnv: NodeJS.ProcessEnv,
  options: { extraArgs?: readonly string[]; readS3Text?: ReadS3Text } = {},
): Promise<{ env: ContainerEnv; argv: string[]; dir: string }> {
  const env = parseContainerEnv(rawEnv);
  const dir = await mkdtemp(join(tmpdir(), `agentrl-${env.AGENTRL_ROLE}-`));
  const configFile = join(dir, "config.json");
  const sweepFile = join(dir, "sweep.json");
  if (env.AGENTRL_ROLE === "sweep") await writeFile(sweepFile, env.AGENTRL_SWEEP_JSON);
  else {
    const config = await resolveContainerConfig(env, {
      rawEnv,
      ...(options.readS3Text ? { readS3Text: options.readS3Text } : {}),
    });
    await writeFile(configFile, JSON.stringify(config, null, 2));
    if (env.AGENTRL_ROLE === "env") await ensureAgentBenchData(env.AGENTRL_TASK, config.tasks.agentbench.dir);
  }
  return { env, argv: [...roleArgv(env, { configFile, sweepFile }), ...(options.extraArgs ?? [])], dir };
}

/**
 * An AgentBench task's worker on ECS finds its data in the image (AGENTRL_AGENTBENCH_DIR or
 * tasks.agentbench.dir) or, when the image has none, fetches it once at start, every file checked
 * against the pinned hashes, into the task's ephemeral storage.
 */
async function ensureAgentBenchData(task: string, configuredDir: string | undefined): Promise<void> {
  const { AGENTBENCH_DIR_ENV, needsAgentBenchData, resolveAgentBenchDir } = await import(
    "../../shared/agentbench/data.ts"
  );
  if (!needsAgentBenchData(task) || resolveAgentBenchDir(configuredDir)) return;
  const { fetchAgentBench } = await import("../../shared/agentbench/fetch.ts");
  const dir = join(tmpdir(), "agentbench");
  process.stderr.write(`${task}: no AgentBench data in the image; fetching it into ${dir}\n`);
  await fetchAgentBench({ dir });
  process.env[AGENTBENCH_DIR_ENV] = dir;
}

/** `agentrl container`: the entrypoint of every image; AGENTRL_ROLE and friends pick and configure the role. */
export function register(program: Command): void {
  program
    .command("container")
    .description(
      "start the role named by AGENTRL_ROLE from the typed container environment (the images' entrypoint); " +
        "arguments after -- go to the role",
    )
    .option("--print", "print the role's resolved agentrl arguments instead of starting it")
    .argument("[args...]", "extra arguments for the role (after --)")
    .action(async (args: string[], options: { print?: boolean }) => {
      const { env, argv, dir } = await prepareContainer(process.env, { extraArgs: args });
      // the resolved config lives as long as the role (a process runner's host keeps its /tmp)
      process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
      if (options.print) {
        process.stdout.write(`${JSON.stringify({ role: env.AGENTRL_ROLE, argv })}\n`);
        return;
      }
      // The role runs in this process (one Node per container; it handles SIGTERM itself once started).
      exitOnSignalUntilHandled();
      await program.parseAsync(argv, { from: "user" });
    });
}
