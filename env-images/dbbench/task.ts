import { z } from "zod";
import type { Episode, StepResult, TaskDefinition, ToolDefinition } from "../../shared/env/task.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { generateSynthInstance, SYNTH_SPLITS, type SynthInstance } from "./generator.ts";
import {
  DBBENCH_SIZES,
  type DbbenchInstance,
  type DbbenchSplit,
  isMutation,
  loadDbbench,
  userPrompt,
} from "./instances.ts";
import {
  DEFAULT_STATEMENT_LIMITS,
  type EpisodeDatabase,
  MYSQL_URL_ENV,
  MysqlHost,
  type StatementLimits,
} from "./mysql.ts";
import { type PrivateServer, startPrivateServer } from "./privateServer.ts";
import type { PyValue } from "./python.ts";
import { type Answer, compareResults, hashFromPrinted } from "./scorer.ts";

/**
 * AgentBench FC's DBBench on a real MySQL-compatible server: the published instances, upstream's
 * prompt, tools, 15 rounds, observations and scoring. Each episode gets its own database (all
 * columns TEXT, as upstream creates them) and its own user; the database is dropped when the
 * episode ends, however it ends.
 */

export const DBBENCH_MAX_ROUNDS = 15;

/** AgentBench FC's DBBench system prompt (Apache-2.0, THUDM/AgentBench), verbatim: models are compared on it. */
export const DBBENCH_SYSTEM_PROMPT = `I will ask you a question, then you should help me operate a MySQL database with SQL to answer the question.
You have to explain the problem and your solution to me and write down your thoughts.
After thinking and explaining thoroughly, every round you can choose to operate or to answer with the two specific tools provided.
If you should execute a SQL query, use the \`execute_sql\` function, Your SQL should be in one line.
Every time you can only execute one SQL statement. I will only execute the statement in the first SQL code block. Every time you write a SQL, I will execute it for you and give you the output.
If you are done operating, and you want to commit your final answer, then use the \`commit_final_answer\` function.
DO NOT use this tool unless you are sure about your answer. I expect an accurate and correct answer.
Your answer should be accurate. Your answer must be exactly the same as the correct answer.
If the question is about modifying the database, then after done operation, your answer field can be anything.
If your response cannot match any pattern I mentioned earlier, you will be judged as FAIL immediately.
You should always use the tools provided to submit your answer. Be careful not to write it in the content field.
Your input will be raw MySQL response, you have to deal with it by yourself.`;

const MAX_SQL_CHARS = 16_000;

export const ExecuteSqlArgs = z
  .object({ query: z.string().min(1).max(MAX_SQL_CHARS).describe("The SQL query to be executed.") })
  .strict();

/** Upstream reads the first argument as it comes; models also commit numbers, a string or null. */
const AnswerItem = z.union([z.string().max(2_000), z.number(), z.boolean(), z.null()]);
export const CommitFinalAnswerArgs = z
  .object({
    answers: z
      .union([z.array(AnswerItem).max(1_000), z.string().max(20_000)])
      .describe("The list of final answers to commit."),
  })
  .strict();

const TOOLS: readonly ToolDefinition[] = [
  {
    name: "execute_sql",
    description: "Executes a given SQL statement on the database and returns the result.",
    parameters: ExecuteSqlArgs,
  },
  {
    name: "commit_final_answer",
    description: "Commits the final answer after all operations are completed.",
    parameters: CommitFinalAnswerArgs,
  },
];

/** A committed value as the Python scorer receives it from the JSON arguments. */
function toPy(value: z.infer<typeof AnswerItem>): PyValue {
  if (typeof value === "number")
    return Number.isInteger(value) ? { kind: "int", text: String(value) } : { kind: "float", value };
  return value;
}

/** Where episodes get their databases: a server connection opened on first use, and how to close it. */
export interface HostProvider {
  get(): Promise<MysqlHost>;
  close(): Promise<void>;
}

/** AGENTRL_MYSQL_URL's server, else a private MariaDB started for this process and stopped with it. */
export function serverFromEnvironment(): HostProvider {
  let opened: Promise<{ host: MysqlHost; server?: PrivateServer }> | undefined;
  return {
    get() {
      opened ??= (async () => {
        const url = process.env[MYSQL_URL_ENV];
        if (url) return { host: await MysqlHost.open(url) };
        const server = await startPrivateServer();
        try {
          return { host: await MysqlHost.open(server.url), server };
        } catch (error) {
          server.stop();
          throw error;
        }
      })();
      const current = opened;
      current.catch(() => {
        if (opened === current) opened = undefined;
      });
      return current.then((o) => o.host);
    },
    async close() {
      const current = opened;
      opened = undefined;
      if (!current) return;
      const { host, server } = await current.catch(() => ({ host: undefined, server: undefined }));
      await host?.close();
      server?.stop();
    },
  };
}

/** What an episode is scored against: upstream's label or answer_md5, or what the reference statement gave. */
type Truth = { readonly kind: "answers"; readonly value: Answer } | { readonly kind: "md5"; readonly value: string };

/**
 * A generated instance's truth, computed as upstream computes an instance without `answer_md5`:
 * the reference statement on a scratch copy of the table, then its rows (SELECT kinds, printed as
 * the connector prints them) or the table hash (mutations).
 */
async function computeTruth(host: MysqlHost, instance: SynthInstance, limits: StatementLimits): Promise<Truth> {
  const scratch = await host.createEpisode(instance.tables);
  try {
    const printed = await scratch.execute(instance.referenceSql, limits);
    if (!printed.startsWith("[")) throw new AgentRlError(`reference statement of ${instance.index} failed: ${printed}`);
    if (!isMutation(instance)) return { kind: "answers", value: printed };
    return { kind: "md5", value: await tablesHash(host, scratch.name, instance) };
  } finally {
    await scratch.drop();
  }
}

/** Upstream's combined hash: each table's md5, sorted, joined by `_`. */
async function tablesHash(host: MysqlHost, database: string, instance: DbbenchInstance): Promise<string> {
  const hashes: string[] = [];
  for (const table of instance.tables)
    hashes.push(hashFromPrinted(await host.printedTableHash(database, table.name, table.columns)));
  return hashes.sort().join("_");
}

class DbbenchEpisode implements Episode {
  readonly messages;

  constructor(
    private readonly instance: DbbenchInstance,
    private readonly truth: Truth,
    private readonly host: MysqlHost,
    private readonly db: EpisodeDatabase,
    private readonly limits: StatementLimits,
  ) {
    this.messages = [
      { role: "system" as const, content: DBBENCH_SYSTEM_PROMPT },
      { role: "user" as const, content: userPrompt(instance) },
    ];
  }

  async call(tool: string, args: unknown, signal: AbortSignal): Promise<StepResult> {
    if (tool === "execute_sql") {
      const { query } = ExecuteSqlArgs.parse(args);
      const observation = await this.db.execute(query, this.limits, signal);
      return { observation: observation || "No response from database." };
    }
    const { answers } = CommitFinalAnswerArgs.parse(args);
    const correct =
      this.truth.kind === "md5"
        ? compareResults(await tablesHash(this.host, this.db.name, this.instance), this.truth.value, this.instance.type)
        : compareResults(
            typeof answers === "string" ? answers : answers.map(toPy),
            this.truth.value,
            this.instance.type,
          );
    return {
      observation: "Your answer has been committed.",
      reward: { reward: correct ? 1 : 0, score: correct ? 1 : 0, metrics: { success: correct ? 1 : 0 } },
      finish: "completed",
    };
  }

  close(): Promise<void> {
    return this.db.drop();
  }
}

export interface DbbenchTaskOptions {
  readonly statementLimits?: Partial<StatementLimits>;
  /** The server episodes use (tests pass their own). @default serverFromEnvironment() */
  readonly host?: HostProvider;
  /** The AgentBench data folder when AGENTRL_AGENTBENCH_DIR is unset. */
  readonly dataDir?: string;
}

/** The DBBench tasks: AgentBench's two published sets, and generated instances in their format. */
export type DbbenchTaskName = DbbenchSplit | "dbbench-synth";

/**
 * `dbbench-std` / `dbbench-dev`: the published instances; train and test are the same instances
 * (upstream publishes no train split). `dbbench-synth`: generated instances for RL (generator.ts).
 */
export function createDbbenchTask(name: DbbenchTaskName, options: DbbenchTaskOptions = {}): TaskDefinition {
  const limits = { ...DEFAULT_STATEMENT_LIMITS, ...options.statementLimits };
  const host = options.host ?? serverFromEnvironment();
  const synthetic = name === "dbbench-synth";
  const instanceAt = (index: number): DbbenchInstance | SynthInstance | undefined =>
    synthetic ? generateSynthInstance(index) : loadDbbench(name, options.dataDir)[index];
  // A GRPO group plays one index n times: a generated instance's truth is computed once.
  const truths = new Map<number, Promise<Truth>>();
  const truthOf = (server: MysqlHost, instance: DbbenchInstance | SynthInstance): Promise<Truth> => {
    if (!("referenceSql" in instance))
      return Promise.resolve(
        isMutation(instance)
          ? { kind: "md5", value: instance.answerMd5 ?? "" }
          : { kind: "answers", value: instance.label },
      );
    let truth = truths.get(instance.index);
    if (!truth) {
      truth = computeTruth(server, instance, limits);
      truth.catch(() => truths.delete(instance.index));
      truths.set(instance.index, truth);
      if (truths.size > 4096) truths.delete(truths.keys().next().value!);
    }
    return truth;
  };
  const all = synthetic ? undefined : { start: 0, end: DBBENCH_SIZES[name] };
  return {
    name,
    tools: TOOLS,
    maxTurns: DBBENCH_MAX_ROUNDS,
    splits: all ? { train: all, test: all } : SYNTH_SPLITS,
    agentErrors: {
      noToolCall: "Internal error: No tool calls found despite finish reason.",
      unknownTool: "Invalid function call. Please call a tool instead.",
      badArguments: "Error: Failed to parse tool call. Tool call format is incorrect.",
    },
    categoryOf: (index: number) => instanceAt(index)?.type,
    close: () => host.close(),
    async start(index: number): Promise<Episode> {
      const instance = instanceAt(index);
      if (!instance) throw new AgentRlError(`${name} has no instance ${index}`);
      const server = await host.get();
      const truth = await truthOf(server, instance);
      const db = await server.createEpisode(instance.tables);
      return new DbbenchEpisode(instance, truth, server, db, limits);
    },
  };
}
