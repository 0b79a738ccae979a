import { z } from "zod";
import type { Episode, StepResult, TaskDefinition } from "../../shared/env/task.ts";
import { generateOsInstance, OS_SPLITS, OS_TASK_NAME, type OsInstance } from "./generator.ts";
import { DEFAULT_SANDBOX_LIMITS, defaultShellPool, OsSandbox, type SandboxLimits, type ShellPool } from "./sandbox.ts";

/**
 * The os task (AgentBench FC `os_interaction`): tools `bash_action(script)`,
 * `finish_action(thought?)` and `answer_action(answer)`, 8 turns. Argument names follow
 * AgentBench FC's configs/tasks/os.yaml; there `finish_action.thought` is required, here it is
 * optional so that a small model can finish with `{}`. Committing (answer or finish) ends the
 * episode with status `completed` and reward 1 or 0, as AgentBench does.
 */

/** Longest script accepted; longer ones fail validation instead of reaching the shell. */
export const MAX_SCRIPT_CHARS = 16_384;

export const BashActionArgs = z.strictObject({
  script: z.string().min(1).max(MAX_SCRIPT_CHARS).describe("The bash script to be executed."),
});
export const FinishActionArgs = z.strictObject({
  thought: z.string().max(4096).optional().describe("The thought or reason indicating the task is finished."),
});
export const AnswerActionArgs = z.strictObject({
  answer: z.string().max(4096).describe("The answer to the question."),
});

export const OS_MAX_TURNS = 8;

export function osSystemPrompt(limits: SandboxLimits): string {
  return [
    "You are an assistant acting in a Linux (Ubuntu) shell. Solve the problem by calling exactly one tool per turn:",
    "- bash_action(script): run a bash script. Each call starts a fresh shell in /home/user: files persist between calls, the working directory and variables do not. No network, no interactive input.",
    `  Outputs longer than ${limits.observationChars} characters are truncated; commands are stopped after ${limits.commandTimeoutMs / 1000} s.`,
    "- answer_action(answer): give the exact answer to a question (for example a single number). This ends the task.",
    "- finish_action(thought): say that the requested change is done. This ends the task.",
    `You have at most ${OS_MAX_TURNS} turns.`,
  ].join("\n");
}

export interface OsTaskOptions {
  /** Overrides of the sandbox limits (tests use a ~1 s command cap). */
  readonly limits?: Partial<SandboxLimits>;
  /** Shell threads to draw from (default: the process-wide pool). */
  readonly pool?: ShellPool;
}

async function judge(instance: OsInstance, sandbox: OsSandbox, answer: string | undefined): Promise<boolean> {
  if (instance.judge.kind === "match") return answer !== undefined && answer.trim() === instance.judge.answer;
  return instance.judge.check(await sandbox.snapshot());
}

class OsEpisode implements Episode {
  readonly messages;
  private sandbox: OsSandbox | undefined;

  constructor(
    private readonly instance: OsInstance,
    limits: SandboxLimits,
    pool: ShellPool,
  ) {
    this.sandbox = new OsSandbox(instance.files, limits, pool);
    this.messages = [
      { role: "system" as const, content: osSystemPrompt(limits) },
      {
        role: "user" as const,
        content: `Now, I will start a new problem in a new OS. My problem is:\n\n${instance.description}`,
      },
    ];
  }

  async call(tool: string, args: unknown, signal: AbortSignal): Promise<StepResult> {
    const sandbox = this.sandbox;
    if (!sandbox) return { observation: "Error: this episode is closed.", finish: "cancelled" };
    switch (tool) {
      case "bash_action": {
        const { script } = BashActionArgs.parse(args);
        return { observation: await sandbox.run(script, signal) };
      }
      case "answer_action":
      case "finish_action": {
        const answer = tool === "answer_action" ? AnswerActionArgs.parse(args).answer : undefined;
        if (tool === "finish_action") FinishActionArgs.parse(args);
        const success = await judge(this.instance, sandbox, answer);
        return {
          observation: `The task is over. Result: ${success ? "success" : "failure"}.`,
          reward: { reward: success ? 1 : 0, score: success ? 1 : 0, metrics: { success: success ? 1 : 0 } },
          finish: "completed",
        };
      }
      default:
        throw new Error(`os has no tool "${tool}"`);
    }
  }

  close(): void {
    this.sandbox?.close();
    this.sandbox = undefined;
  }
}

/** Builds the os task; `options.limits` overrides the sandbox limits (command cap, truncation). */
export function createOsTask(options: OsTaskOptions = {}): TaskDefinition {
  const limits: SandboxLimits = { ...DEFAULT_SANDBOX_LIMITS, ...options.limits };
  const pool = options.pool ?? defaultShellPool;
  return {
    name: OS_TASK_NAME,
    tools: [
      {
        name: "bash_action",
        description: "Execute bash code to perform an operation in the Linux environment.",
        parameters: BashActionArgs,
      },
      {
        name: "finish_action",
        description: "Indicate that the task has been finished or need some additional information to be finished.",
        parameters: FinishActionArgs,
      },
      { name: "answer_action", description: "Provide the answer to the question.", parameters: AnswerActionArgs },
    ],
    maxTurns: OS_MAX_TURNS,
    splits: OS_SPLITS,
    categoryOf: (index: number) => generateOsInstance(index).family,
    async start(index: number): Promise<Episode> {
      return new OsEpisode(generateOsInstance(index), limits, pool);
    },
  };
}
