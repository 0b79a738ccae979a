import { osImagesFrom } from "../../shared/agentbench/osImages.ts";
import type { Episode, StepResult, TaskDefinition } from "../../shared/env/task.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { loadOs, OS_SIZES, type OsInstance, type OsSplit } from "./instances.ts";
import {
  AnswerActionArgs,
  BashActionArgs,
  FinishActionArgs,
  OS_AGENT_ERRORS,
  OS_MAX_ROUNDS,
  OS_SYSTEM_PROMPT,
  OS_TOOLS,
  osUserPrompt,
} from "./prompts.ts";
import { ContainerBackend, detectContainerCli, type Sandbox, type SandboxBackend, workerIdentity } from "./sandbox.ts";
import { bashObservation, type Committed, independentArgv, judge } from "./scorer.ts";

/**
 * AgentBench FC's OS interaction on real containers: the published instances, upstream's prompt,
 * tools, 8 rounds, observations and scoring. Each episode gets its own container from the
 * instance's image, the init scripts run in it, then the `start` script in the agent's shell; the
 * container is removed when the episode ends, however it ends.
 */

/**
 * Instances whose init or example fetches packages (`apt install`, `pip install`) need a network
 * (os-std 52, 53, 55); the rest run without one.
 */
export function needsNetwork(instance: OsInstance): boolean {
  const evaluation = instance.evaluation;
  const example = evaluation.kind === "check" && evaluation.example ? [evaluation.example] : [];
  return [...instance.init, ...example].some((script) =>
    /\bapt(-get)?\s+(update|install)\b|\bpip3?\s+install\b|\bnpm\s+install\b/.test(script.code),
  );
}

/** `AGENTRL_OS_NETWORK=1` lets those instances reach the network; without it they fail to start, with that reason. */
export const OS_NETWORK_ENV = "AGENTRL_OS_NETWORK";

const INIT_TIMEOUT_MS = 300_000;
const CHECK_TIMEOUT_MS = 120_000;

class OsEpisode implements Episode {
  readonly messages;

  constructor(
    private readonly instance: OsInstance,
    private readonly sandbox: Sandbox,
  ) {
    this.messages = [
      { role: "system" as const, content: OS_SYSTEM_PROMPT },
      { role: "user" as const, content: osUserPrompt(instance.description) },
    ];
  }

  async call(tool: string, args: unknown, signal: AbortSignal): Promise<StepResult> {
    if (tool === "bash_action") {
      const { script } = BashActionArgs.parse(args);
      // A disk-filling agent ends its own episode, scored 0 as an invalid action.
      const stopped = (output: string) => {
        const exceeded = this.sandbox.limitExceeded;
        return exceeded
          ? { observation: `${output}${exceeded}: the episode ends.`, finish: "agent invalid action" as const }
          : undefined;
      };
      const before = stopped("");
      if (before) return before;
      const result = await this.sandbox.shell().run(script, signal);
      const observation = bashObservation(result.output);
      return stopped(`${observation}\n`) ?? { observation };
    }
    // finish_action's thought and answer_action's answer are both what the checks receive.
    const answer: Committed =
      tool === "finish_action" ? FinishActionArgs.parse(args).thought : AnswerActionArgs.parse(args).answer;
    const verdict = await judge(answer, this.instance.evaluation, async (script, params) => {
      const run = await this.sandbox.run(independentArgv(script, params), { timeoutMs: CHECK_TIMEOUT_MS, signal });
      return { exitCode: run.exitCode, stdout: run.stdout };
    });
    const value = verdict.success ? 1 : 0;
    return {
      observation: "Your answer has been committed.",
      reward: { reward: value, score: value, metrics: { success: value } },
      finish: "completed",
    };
  }

  close(): Promise<void> {
    return this.sandbox.close();
  }
}

export interface OsTaskOptions {
  /** Where episodes run. @default podman or Docker, whichever answers */
  readonly backend?: SandboxBackend;
  /** The AgentBench data folder when AGENTRL_AGENTBENCH_DIR is unset. */
  readonly dataDir?: string;
  /**
   * Image names per AgentBench subtype.
   * @default AGENTRL_OS_IMAGE_DEFAULT / _PACKAGES, else the stand-ins `npm run images -- --agentbench-os` builds
   */
  readonly images?: Readonly<Record<string, string>>;
  /** Lets instances that fetch packages at init use the network. @default AGENTRL_OS_NETWORK=1 */
  readonly network?: boolean;
}

/** A backend for the host: podman or Docker; its first use sweeps dead workers' containers. */
function hostBackend(): () => Promise<SandboxBackend> {
  let found: Promise<SandboxBackend> | undefined;
  return () => {
    found ??= (async () => {
      const cli = await detectContainerCli();
      if (!cli)
        throw new AgentRlError(
          "the OS tasks run each episode in a container: install podman (apt-get install podman runc) or start Docker",
        );
      const backend = new ContainerBackend(cli, undefined, {}, await workerIdentity());
      await backend.sweepOrphans();
      return backend;
    })();
    return found;
  };
}

/** `os-std`, `os-dev`, `os-env_train`: train and test are the same instances (as with DBBench). */
export function createOsTask(name: OsSplit, options: OsTaskOptions = {}): TaskDefinition {
  const backendOf = options.backend ? () => Promise.resolve(options.backend!) : hostBackend();
  const images: Readonly<Record<string, string>> = options.images ?? osImagesFrom();
  const network = options.network ?? process.env[OS_NETWORK_ENV] === "1";
  const all = { start: 0, end: OS_SIZES[name] };
  const unavailable = (index: number): string | undefined => {
    const instance = loadOs(name, options.dataDir)[index];
    return instance && needsNetwork(instance) && !network
      ? `installs packages and needs a network: set ${OS_NETWORK_ENV}=1 where containers may reach one`
      : undefined;
  };
  return {
    name,
    tools: OS_TOOLS,
    maxTurns: OS_MAX_ROUNDS,
    splits: { train: all, test: all },
    agentErrors: OS_AGENT_ERRORS,
    categoryOf: (index: number) => {
      const instance = loadOs(name, options.dataDir)[index];
      return instance ? instance.file.replace(/^os_interaction\//, "") : undefined;
    },
    unavailable,
    async start(index: number, signal: AbortSignal): Promise<Episode> {
      const instance = loadOs(name, options.dataDir)[index];
      if (!instance) throw new AgentRlError(`${name} has no instance ${index}`);
      const image = images[instance.image];
      if (!image) throw new AgentRlError(`${name} ${index}: no image for AgentBench's "${instance.image}" subtype`);
      // Offline, these cannot be solved (their init or solution installs a package): say so, not apt's error.
      const why = unavailable(index);
      if (why) throw new AgentRlError(`${name} ${index}: ${why}`);
      const backend = await backendOf();
      const sandbox = await backend.start({ image, network: needsNetwork(instance), task: name }, signal);
      try {
        for (const [i, script] of instance.init.entries()) {
          const run = await sandbox.run(independentArgv(script, []), { timeoutMs: INIT_TIMEOUT_MS, signal });
          if (run.exitCode !== 0)
            throw new AgentRlError(
              `${name} ${index}: init script ${i + 1} exited ${run.exitCode}: ${Buffer.from(run.stderr).toString().slice(-500)}`,
            );
        }
        // Upstream runs `start` in the agent's own shell and does not wait on a status.
        if (instance.start) await sandbox.shell().run(instance.start.code, signal);
        return new OsEpisode(instance, sandbox);
      } catch (error) {
        await sandbox.close();
        throw error;
      }
    },
  };
}
