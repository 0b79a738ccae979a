import { z } from "zod";
import { EnvLimitsConfig } from "../config/limits.ts";
import { formatPath } from "../errors.ts";
import type { SampleStatus } from "../protocol/envApi.ts";
import type { AssistantMessage, ChatMessage, ToolMessage, ToolSpec } from "../protocol/openai.ts";
import type { Episode, RewardItem, ScriptedAgent, TaskDefinition } from "./task.ts";

/** OpenAI tool schemas of a task, generated from its zod argument schemas. */
export function toolSpecs(task: TaskDefinition): ToolSpec[] {
  return task.tools.map((tool) => {
    const { $schema: _drop, ...parameters } = z.toJSONSchema(tool.parameters) as Record<string, unknown>;
    return { type: "function", function: { name: tool.name, description: tool.description, parameters } };
  });
}

/**
 * Episode limits a caller cannot pass (`limits.env`, ServeTaskOptions.episodeLimits): tool calls
 * per turn (a turn with more runs none) and characters of a bad tool name or argument text
 * echoed back in an error.
 */
export type EpisodeLimits = EnvLimitsConfig;

export const DEFAULT_EPISODE_LIMITS: EpisodeLimits = EnvLimitsConfig.parse({});

/** `text` cut to `max` characters with a note of how much was left out (never echo a caller's megabytes back). */
export function capEcho(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length - max} more characters)`;
}

export interface TurnResult {
  /** Only the new messages (tool results, or a user note when the turn had no tool call). */
  readonly messages: ChatMessage[];
  readonly finish: boolean;
  readonly reward: number;
  readonly status: SampleStatus;
  readonly metrics: Record<string, number>;
}

/**
 * One episode under the AgentRL rules, independent of HTTP: validates each tool call (unknown
 * tool -> `agent invalid action`; arguments that are not JSON or fail the schema -> `agent
 * validation failed`; a turn without a tool call -> `agent validation failed`), counts turns
 * (`task limit reached`), and keeps the last reward item. Task exceptions end the episode with
 * `task error` instead of escaping. The worker runtime and `env check` both drive episodes
 * through this class, so they cannot disagree on the rules.
 */
export class EpisodeSession {
  private turns = 0;
  private status: SampleStatus = "running";
  private lastReward: RewardItem | undefined;
  private closed = false;

  constructor(
    readonly task: TaskDefinition,
    private readonly episode: Episode,
    private readonly limits: EpisodeLimits = DEFAULT_EPISODE_LIMITS,
  ) {}

  get finished(): boolean {
    return this.status !== "running";
  }
  get currentStatus(): SampleStatus {
    return this.status;
  }
  get turnCount(): number {
    return this.turns;
  }
  get reward(): number {
    return this.lastReward?.reward ?? 0;
  }
  get initialMessages(): readonly ChatMessage[] {
    return this.episode.messages;
  }

  /** Applies one assistant turn. Calling it on a finished episode returns the final state unchanged. */
  async interact(message: AssistantMessage, signal: AbortSignal): Promise<TurnResult> {
    if (this.finished) return this.result([]);
    this.turns += 1;
    const calls = message.tool_calls ?? [];
    const out: ChatMessage[] = [];
    const lenient = this.task.agentErrors;
    if (calls.length === 0) {
      if (lenient) {
        out.push({ role: "user", content: lenient.noToolCall });
        return this.afterTurn(out);
      }
      out.push({ role: "user", content: "No tool was called. Every turn must call one of the provided tools." });
      await this.end("agent validation failed");
      return this.result(out);
    }
    if (calls.length > this.limits.maxToolCallsPerTurn) {
      const first = calls[0];
      out.push({
        role: "tool",
        tool_call_id: first?.id ?? "",
        name: capEcho(first?.function.name ?? "", this.limits.maxEchoChars),
        content: `Error: ${calls.length} tool calls in one turn; at most ${this.limits.maxToolCallsPerTurn} are allowed. None was run.`,
      });
      await this.end("agent invalid action");
      return this.result(out);
    }
    const echo = (text: string) => capEcho(text, this.limits.maxEchoChars);
    for (const call of calls) {
      const reply = (content: string): ToolMessage => ({
        role: "tool",
        tool_call_id: call.id,
        name: echo(call.function.name),
        content,
      });
      const tool = this.task.tools.find((t) => t.name === call.function.name);
      if (!tool && lenient) {
        out.push(reply(lenient.unknownTool));
        continue;
      }
      if (!tool) {
        const allowed = this.task.tools.map((t) => t.name).join(", ");
        out.push(reply(`Error: unknown tool "${echo(call.function.name)}". Available tools: ${allowed}.`));
        await this.end("agent invalid action");
        break;
      }
      let rawArgs: unknown;
      try {
        rawArgs = call.function.arguments.trim() === "" ? {} : JSON.parse(call.function.arguments);
      } catch {
        if (lenient) {
          out.push(reply(lenient.badArguments));
          continue;
        }
        out.push(reply(`Error: the arguments of ${tool.name} are not valid JSON: ${echo(call.function.arguments)}`));
        await this.end("agent validation failed");
        break;
      }
      const parsed = tool.parameters.safeParse(rawArgs);
      if (!parsed.success) {
        const why = parsed.error.issues.map((i) => `${formatPath(i.path) || "arguments"}: ${i.message}`).join("; ");
        out.push(reply(`Error: invalid arguments for ${tool.name}: ${echo(why)}`));
        if (lenient) continue;
        await this.end("agent validation failed");
        break;
      }
      try {
        const step = await this.episode.call(tool.name, parsed.data, signal);
        out.push(reply(step.observation));
        if (step.reward) this.lastReward = step.reward;
        if (step.finish) {
          await this.end(step.finish);
          break;
        }
      } catch (error) {
        if (signal.aborted) {
          await this.end("cancelled");
          break;
        }
        out.push(reply(`Error: the environment failed while running ${tool.name}.`));
        this.lastReward = { reward: 0, metrics: { task_error: 1 } };
        await this.end("task error", error);
        break;
      }
    }
    return this.afterTurn(out);
  }

  private async afterTurn(out: ChatMessage[]): Promise<TurnResult> {
    if (!this.finished && this.turns >= this.task.maxTurns) await this.end("task limit reached");
    return this.result(out);
  }

  /** Ends the episode (idempotent) and frees its resources. */
  async end(status: SampleStatus, _cause?: unknown): Promise<void> {
    if (this.status === "running") this.status = status;
    if (this.closed) return;
    this.closed = true;
    await this.episode.close?.();
  }

  private result(messages: ChatMessage[]): TurnResult {
    return {
      messages,
      finish: this.finished,
      reward: this.reward,
      status: this.status,
      metrics: { turns: this.turns, ...(this.lastReward?.metrics ?? {}), ...scoreMetric(this.lastReward) },
    };
  }
}

function scoreMetric(item: RewardItem | undefined): Record<string, number> {
  return item?.score === undefined ? {} : { score: item.score };
}

export interface ScriptedRun {
  readonly index: number;
  readonly status: SampleStatus;
  readonly reward: number;
  readonly turns: number;
  readonly messages: ChatMessage[];
}

/** Runs a scripted agent through one episode in-process (expert solvers, baselines, `env check`). */
export async function runScripted(
  task: TaskDefinition,
  index: number,
  agent: ScriptedAgent,
  signal: AbortSignal = new AbortController().signal,
): Promise<ScriptedRun> {
  const session = new EpisodeSession(task, await task.start(index, signal));
  const messages: ChatMessage[] = [...session.initialMessages];
  try {
    while (!session.finished) {
      const action = await agent.act(messages, index);
      messages.push(action);
      const turn = await session.interact(action, signal);
      messages.push(...turn.messages);
    }
  } finally {
    await session.end("cancelled");
  }
  return { index, status: session.currentStatus, reward: session.reward, turns: session.turnCount, messages };
}

export interface ScriptedStats {
  readonly episodes: number;
  /** Episodes completed with the task fully solved (reward ≥ 1; a partial WebShop purchase is not a success). */
  readonly successes: number;
  readonly successRate: number;
  readonly meanReward: number;
  readonly meanTurns: number;
  readonly statuses: Record<string, number>;
  /** Episodes not solved, with what the agent read last: for an expert, each is a finding. */
  readonly misses: ReadonlyArray<{ index: number; status: string; reward: number; lastObservations: string[] }>;
}

/**
 * `indices` split into those this host can run and those it cannot, grouped by the task's reason
 * (TaskDefinition.unavailable): `env check` scores the first and counts the second.
 * @example runnableIndices(osStd, [51, 52, 53]) // { indices: [51], skipped: Map { "installs packages…" => [52, 53] } }
 */
export function runnableIndices(
  task: Pick<TaskDefinition, "unavailable">,
  indices: readonly number[],
): { indices: number[]; skipped: Map<string, number[]> } {
  const runnable: number[] = [];
  const skipped = new Map<string, number[]>();
  for (const index of indices) {
    const why = task.unavailable?.(index);
    if (why === undefined) runnable.push(index);
    else skipped.set(why, [...(skipped.get(why) ?? []), index]);
  }
  return { indices: runnable, skipped };
}

/** Plays `agent` on each index in turn and sums up the episodes (`env check`, the tasks' own tests). */
export async function scriptedStats(
  task: TaskDefinition,
  agent: ScriptedAgent,
  indices: readonly number[],
): Promise<ScriptedStats> {
  let successes = 0;
  let rewardSum = 0;
  let turnSum = 0;
  const statuses: Record<string, number> = {};
  const misses: ScriptedStats["misses"][number][] = [];
  for (const index of indices) {
    let run: ScriptedRun;
    try {
      run = await runScripted(task, index, agent);
    } catch (error) {
      // An instance the environment cannot even start is a task error, as a worker reports it.
      const message = error instanceof Error ? error.message : String(error);
      run = { index, status: "task error", reward: 0, turns: 0, messages: [{ role: "user", content: message }] };
    }
    if (run.status === "completed" && run.reward >= 1) successes += 1;
    else {
      // The last two things the environment said: the final one is often just "committed".
      const said = run.messages
        .slice(run.turns === 0 ? 0 : 2)
        .flatMap((m) => ((m.role === "tool" || m.role === "user") && typeof m.content === "string" ? [m.content] : []));
      misses.push({ index, status: run.status, reward: run.reward, lastObservations: said.slice(-2) });
    }
    rewardSum += run.reward;
    turnSum += run.turns;
    statuses[run.status] = (statuses[run.status] ?? 0) + 1;
  }
  const n = Math.max(1, indices.length);
  return {
    episodes: indices.length,
    successes,
    successRate: successes / n,
    meanReward: rewardSum / n,
    meanTurns: turnSum / n,
    statuses,
    misses,
  };
}
