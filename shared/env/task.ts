import type { z } from "zod";
import type { SampleStatus } from "../protocol/envApi.ts";
import type { AssistantMessage, ChatMessage } from "../protocol/openai.ts";

/**
 * What a task author writes; the env worker runtime turns it into an AgentRL worker
 * (sessions, concurrency limit, statuses, heartbeats). Tool arguments are zod schemas: the
 * runtime publishes them as JSON Schema (z.toJSONSchema) and validates calls against them.
 */
export interface ToolDefinition<S extends z.ZodType = z.ZodType> {
  readonly name: string;
  readonly description: string;
  readonly parameters: S;
}

/** An inclusive-exclusive range of instance indices: [start, end). */
export interface IndexRange {
  readonly start: number;
  readonly end: number;
}

/** A reward item; the last one a task emits is the episode's reward (AgentRL convention). */
export interface RewardItem {
  readonly reward: number;
  /** Graded score (e.g. F1 in KG) kept beside the reward. */
  readonly score?: number;
  readonly metrics?: Readonly<Record<string, number>>;
}

/** Result of one tool call inside an episode. */
export interface StepResult {
  /** Text the agent reads as the tool message. */
  readonly observation: string;
  readonly reward?: RewardItem;
  /** Set when the episode ends with this call (`completed`, `agent invalid action`, ...). */
  readonly finish?: SampleStatus;
}

/** One running instance of a task. */
export interface Episode {
  /** Opening messages (system and user) shown to the agent. */
  readonly messages: readonly ChatMessage[];
  /**
   * Executes one validated tool call. `signal` aborts when the session is cancelled or times out;
   * long work (a shell command, a query) must stop when it fires.
   */
  call(tool: string, args: unknown, signal: AbortSignal): Promise<StepResult>;
  /** Frees resources (sandboxes, databases); called once when the session ends, however it ends. */
  close?(): void | Promise<void>;
}

export interface TaskDefinition {
  readonly name: string;
  readonly tools: readonly ToolDefinition[];
  /** Assistant turns allowed before `task limit reached`. */
  readonly maxTurns: number;
  readonly splits: { readonly train: IndexRange; readonly test: IndexRange };
  /**
   * How an agent's malformed turn is answered. Absent (AgentRL's rule): a turn without a tool
   * call, an unknown tool or bad arguments end the episode (`agent validation failed` /
   * `agent invalid action`). Present (AgentBench FC's own tasks): the agent reads the given text,
   * the turn counts, and the episode goes on until it ends or reaches `maxTurns`.
   */
  readonly agentErrors?: {
    readonly noToolCall: string;
    readonly unknownTool: string;
    readonly badArguments: string;
  };
  /**
   * The kind of instance `index` (DBBench's question type, ...), for evaluation tables that break
   * success down the way the benchmark reports it; absent for tasks without kinds.
   */
  categoryOf?(index: number): string | undefined;
  /**
   * Why instance `index` cannot run where this worker runs (an OS instance that installs packages,
   * on a host whose containers have no network), or undefined when it can. `env check` skips and
   * counts such instances instead of scoring them as misses; `start` still refuses them.
   */
  unavailable?(index: number): string | undefined;
  /** Frees what the task holds across episodes (a database server, its connections); called once when its worker stops. */
  close?(): Promise<void>;
  /** Builds the episode of instance `index`; deterministic by index. */
  start(index: number, signal: AbortSignal): Promise<Episode>;
}

/**
 * A scripted agent (expert solver, random baseline) that acts only through the tool API:
 * it sees the same messages an LLM would and answers with an assistant message.
 */
export interface ScriptedAgent {
  readonly name: string;
  act(messages: readonly ChatMessage[], index: number): AssistantMessage | Promise<AssistantMessage>;
}

/**
 * What each env-images/<task>/index.ts exports as `taskModule`: the task plus two scripted
 * agents that act only through the tool API (the expert proves solvability and yields warm-up
 * demonstrations; the random agent is the baseline). Registered in env-images/registry.ts.
 */
export interface TaskModule {
  readonly task: TaskDefinition;
  readonly expert: ScriptedAgent;
  readonly random: ScriptedAgent;
}
