/**
 * How the deploy rehearsal runs a role: as a process of this checkout (`node bin/agentrl.mjs
 * container`), or as a container of its built image on one bridge network, as ECS would run it.
 * Either way the role gets its task definition's environment (read from the template), the
 * moto endpoint and its own task role's keys, and the rehearsal reads its stdout (ready lines)
 * and stderr (denials) as it runs.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { constants, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { taskAddress } from "../../cli/commands/container.ts";
import { SUPERVISOR_PID_ENV } from "../../cli/supervisorWatch.ts";
import type { ContainerRole } from "../../shared/config/containerEnv.ts";
import { freePort } from "../../shared/net.ts";
import { removeContainers, runArgs } from "../images/containers.ts";
import { type ContainerEngine, exec } from "../images/engine.ts";
import type { AccessKey } from "./moto.ts";
import { REGION } from "./moto.ts";
import type { TaskRoleDefinition } from "./template.ts";

const REPOSITORY_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const AGENTRL_BIN = join(REPOSITORY_ROOT, "bin/agentrl.mjs");

/** The gateway's admin key in a rehearsal: ECS would inject it from Secrets Manager, which moto does not run. */
export const REHEARSAL_GATEWAY_ADMIN_KEY = "rehearsal-gateway-admin-key-0123456789";

/** What every role is started with besides its template's environment. */
export interface RoleLaunch {
  readonly definition: TaskRoleDefinition;
  /** The task definition's environment, resolved against the deployed stacks. */
  readonly environment: Readonly<Record<string, string>>;
  /** The role's own task-role keys. */
  readonly key: AccessKey;
  readonly endpoint: string;
}

/** How one role stopped at the end of the rehearsal. */
export interface RoleStop {
  readonly seconds: number;
  /** Its task definition's stop timeout: SIGKILL after this many seconds. */
  readonly limitSeconds: number;
  /** Exit code, 128 + the signal number when a signal ended it: 137 when killed after its stop timeout; null when it has not exited. */
  readonly exitCode: number | null;
}

/** Starts roles one way (processes or containers). */
export interface RoleRunner {
  readonly kind: "process" | "container";
  /** The address moto must listen on so that the roles reach it. */
  readonly motoHost: string;
  /** Sets up what the roles share (a network) before the first starts. */
  prepare(): Promise<void>;
  /** Starts a role; the child's stdout and stderr are the role's. */
  start(launch: RoleLaunch): Promise<ChildProcess>;
  /** SIGTERM, then SIGKILL after the task definition's stop timeout, as ECS stops a task. */
  stop(definition: TaskRoleDefinition, child: ChildProcess): Promise<RoleStop>;
  /** The container of a role (container runner only), for `exec` in tests. */
  containerName?(definition: TaskRoleDefinition): string;
  /** The network the roles share (container runner only). */
  readonly network?: string;
  /** Removes whatever is left (containers, network); errors ignored. */
  cleanup(): Promise<void>;
}

/** A child's exit code as a shell or ECS reports it: 128 + the signal's number when a signal ended it. */
export function exitCodeOf(child: Pick<ChildProcess, "exitCode" | "signalCode">): number | null {
  if (child.exitCode !== null) return child.exitCode;
  return child.signalCode ? 128 + (constants.signals[child.signalCode] ?? 0) : null;
}

function waitForExit(child: ChildProcess, limitMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolveExit) => {
    const timer = setTimeout(() => resolveExit(false), limitMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolveExit(true);
    });
  });
}

/**
 * Every role a process of this checkout on 127.0.0.1. There is no Cloud Map here, so the network
 * addresses (host, ports, peer URLs) are the one part of the environment this runner sets itself.
 */
export function processRunner(): RoleRunner {
  /** The roles' run folders, removed by cleanup(). */
  const runDirs: string[] = [];
  const runDir = (definition: TaskRoleDefinition) => {
    const dir = mkdtempSync(join(tmpdir(), `agentrl-rehearse-${definition.role}-`));
    runDirs.push(dir);
    return dir;
  };
  const ports = new Map<string, number>();
  const portOf = async (key: string) => {
    if (!ports.has(key)) ports.set(key, await freePort());
    return ports.get(key)!;
  };
  const url = async (key: string) => `http://127.0.0.1:${await portOf(key)}`;
  const network = async (definition: TaskRoleDefinition): Promise<Record<string, string>> => ({
    ...("AGENTRL_PORT" in definition.environment ? { AGENTRL_PORT: String(await portOf(definition.key)) } : {}),
    AGENTRL_HOST: "127.0.0.1",
    // every task has /metrics on the same port of its own ENI; processes of one host each need their own
    ...("AGENTRL_METRICS_PORT" in definition.environment
      ? {
          AGENTRL_METRICS_PORT: String(await portOf(`${definition.key}:metrics`)),
          AGENTRL_METRICS_HOST: "127.0.0.1",
        }
      : {}),
    ...("AGENTRL_CONTROLLER_URL" in definition.environment ? { AGENTRL_CONTROLLER_URL: await url("controller") } : {}),
    ...(definition.role === "env" ? { AGENTRL_ADVERTISE_HOST: "127.0.0.1" } : {}),
    ...(definition.role === "rollout" || definition.role === "gateway"
      ? {
          AGENTRL_POLICY_CURRENT_URL: await url("policy:current"),
          AGENTRL_POLICY_STALE_URL: await url("policy:stale"),
        }
      : {}),
    // what ECS injects from Secrets Manager (the other roles' secrets are optional; this one is not)
    ...(definition.role === "gateway" ? { AGENTRL_GATEWAY_ADMIN_KEY: REHEARSAL_GATEWAY_ADMIN_KEY } : {}),
  });
  return {
    kind: "process",
    motoHost: "127.0.0.1",
    async prepare() {},
    async start({ definition, environment, key, endpoint }) {
      const env: NodeJS.ProcessEnv = {
        PATH: process.env.PATH,
        HOME: process.env.HOME,
        ...environment,
        ...(await network(definition)),
        AGENTRL_AWS_ENDPOINT: endpoint,
        AWS_REGION: REGION,
        AWS_ACCESS_KEY_ID: key.accessKeyId,
        AWS_SECRET_ACCESS_KEY: key.secretAccessKey,
        AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
        AGENTRL_LOG_LEVEL: "warn",
        // the trainer's run folder (metrics.jsonl) goes to a temp dir, not the checkout
        AGENTRL__runDir: runDir(definition),
        // where the rehearsal's own temp files go (the container command writes the role's config there)
        ...(process.env.TMPDIR ? { TMPDIR: process.env.TMPDIR } : {}),
        // the role stops if the rehearsal is killed without stopping it (cli/supervisorWatch.ts)
        [SUPERVISOR_PID_ENV]: String(process.pid),
      };
      return spawn(process.execPath, [AGENTRL_BIN, "container"], {
        cwd: REPOSITORY_ROOT,
        env,
        stdio: ["ignore", "pipe", "pipe"],
      });
    },
    async stop(definition, child) {
      const started = Date.now();
      child.kill("SIGTERM");
      if (!(await waitForExit(child, definition.stopTimeoutSeconds * 1000))) {
        child.kill("SIGKILL");
        await waitForExit(child, 10_000);
        return { seconds: (Date.now() - started) / 1000, limitSeconds: definition.stopTimeoutSeconds, exitCode: 137 };
      }
      return {
        seconds: (Date.now() - started) / 1000,
        limitSeconds: definition.stopTimeoutSeconds,
        exitCode: exitCodeOf(child),
      };
    },
    async cleanup() {
      for (const dir of runDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Options of {@link containerRunner}. */
export interface ContainerRunnerOptions {
  readonly engine: ContainerEngine;
  /** The image (tag) of each role, e.g. functions for the controller, trainer-cpu for the trainer. */
  readonly imageOf: (role: ContainerRole) => string;
  /** Suffix of the network and container names (several rehearsals may share the engine). @default the pid */
  readonly suffix?: string;
}

/**
 * Every role a container of its image on one bridge network, with exactly its task definition's
 * environment plus what ECS would add (the region and the task role's keys) and the moto
 * endpoint; the Cloud Map names (`controller.agentrl.local`) are network aliases, so peer URLs
 * come from the template unchanged. moto listens on this machine's own address, which the
 * containers reach.
 */
export function containerRunner(options: ContainerRunnerOptions): RoleRunner {
  const { engine } = options;
  const suffix = options.suffix ?? String(process.pid);
  const network = `agentrl-rehearsal-${suffix}`;
  const names: string[] = [];
  const containerName = (definition: TaskRoleDefinition) => `agentrl-${definition.name}-${suffix}`;
  return {
    kind: "container",
    motoHost: taskAddress(),
    network,
    containerName,
    async prepare() {
      const created = await exec(engine.bin, ["network", "create", network], { timeoutMs: 60_000 });
      if (created.status !== 0) throw new Error(`cannot create network ${network}: ${created.stderr}`);
    },
    async start({ definition, environment, key, endpoint }) {
      const name = containerName(definition);
      names.push(name);
      const args = runArgs(engine, {
        name,
        image: options.imageOf(definition.role),
        env: {
          ...environment,
          AGENTRL_AWS_ENDPOINT: endpoint,
          AWS_REGION: REGION,
          AWS_ACCESS_KEY_ID: key.accessKeyId,
          AWS_SECRET_ACCESS_KEY: key.secretAccessKey,
        },
        network,
        aliases: [`${definition.name}.agentrl.local`],
      });
      // Attached (not -d): the container's stdout and stderr come through this child, and its
      // exit code is the container's.
      return spawn(engine.bin, ["run", ...args], { stdio: ["ignore", "pipe", "pipe"] });
    },
    async stop(definition, child) {
      const started = Date.now();
      await exec(engine.bin, ["stop", "--time", String(definition.stopTimeoutSeconds), containerName(definition)], {
        timeoutMs: (definition.stopTimeoutSeconds + 60) * 1000,
      });
      await waitForExit(child, 30_000);
      return {
        seconds: (Date.now() - started) / 1000,
        limitSeconds: definition.stopTimeoutSeconds,
        exitCode: child.exitCode,
      };
    },
    async cleanup() {
      await removeContainers(engine, names);
      await exec(engine.bin, ["network", "rm", "-f", network], { timeoutMs: 60_000 }).catch(() => undefined);
    },
  };
}
