import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeRunReport } from "../../cli/report/report.ts";
import { ChatCodec } from "../../shared/chat/codec.ts";
import { type ExperimentConfig, parseConfig } from "../../shared/config/index.ts";
import { initBackend } from "../../shared/model/backend.ts";
import { saveCheckpoint } from "../../shared/model/checkpoint.ts";
import { createPolicy } from "../../shared/model/transformer.ts";
import type { Trajectory } from "../../shared/protocol/messages.ts";
import type { ChatMessage, ToolSpec } from "../../shared/protocol/openai.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { runTrainer } from "../../trainer-image/trainer/trainer.ts";
import { deliver } from "../roles/trainerHelpers.ts";

/**
 * A real run folder made in the test: the committed tokenizer, a tiny model, the real trainer on
 * the local transport for `steps` steps over chat trajectories with tool calls (so step records,
 * metrics.jsonl and report.html are the trainer's own), plus `extra` trajectories delivered but
 * never trained (the list's "not consumed yet" rows, and enough rows to page through).
 */

const TOKENIZER = fileURLToPath(new URL("../../trainer-image/base-policy/policies/v0/tokenizer.json", import.meta.url));

const TOOLS: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "execute_sql",
      description: "run one SQL query",
      parameters: { type: "object", properties: { query: { type: "string" } } },
    },
  },
];

export interface TestRun {
  readonly runDir: string;
  readonly config: ExperimentConfig;
  /** Trajectories the trainer consumed, in delivery order. */
  readonly trained: readonly Trajectory[];
  readonly extra: number;
}

function conversation(group: number, sample: number, answer: number): ChatMessage[] {
  return [
    { role: "system", content: "You answer questions about a database with SQL." },
    { role: "user", content: `How many rows does table t${group} have?` },
    {
      role: "assistant",
      content: null,
      tool_calls: [
        {
          id: `call_${sample}`,
          type: "function",
          function: { name: "execute_sql", arguments: JSON.stringify({ query: `SELECT COUNT(*) FROM t${group}` }) },
        },
      ],
    },
    { role: "tool", content: `[[${group + 3}]]`, tool_call_id: `call_${sample}`, name: "execute_sql" },
    { role: "assistant", content: `The table has ${answer} rows.` },
  ];
}

/** One episode as a rollout worker would store it: real tokens of the chat, behaviour log-probs drawn per token. */
function trajectory(codec: ChatCodec, experimentId: string, group: number, sample: number): Trajectory {
  const task = group % 2 === 0 ? "db" : "os";
  const correct = sample % 2 === 0;
  const answer = correct ? group + 3 : group + 4;
  const messages = conversation(group, sample, answer);
  const { tokens, lossMask } = codec.encodeConversation(messages, TOOLS);
  const random = seededRandom(group * 100 + sample);
  const pool = sample === 1 ? "stale" : "current";
  const groupId = `${experimentId}-${task}-${group}`;
  return {
    schemaVersion: 1,
    trajectoryId: `${groupId}-s${sample}`,
    experimentId,
    groupId,
    task,
    index: group,
    sample,
    groupSize: 2,
    messages,
    tools: TOOLS,
    tokenIds: tokens,
    lossMask: lossMask as Array<0 | 1>,
    // near what the untrained model assigns (log 1/1024): ratios land on both sides of 1, some past the clip
    logprobs: lossMask.map((m) => (m ? Math.log(1 / 1024) + 0.6 * (random() - 0.5) : 0)),
    behaviorLogprobs: "full",
    policyVersion: lossMask.map((m) => (m ? 0 : -1)),
    policyPool: lossMask.map((m) => (m ? pool : null)),
    reward: correct ? 1 : 0,
    envReward: correct ? 1 : 0,
    status: "completed",
    turns: 2,
    metrics: {},
    timings: { startedAt: new Date(0).toISOString(), finishedAt: new Date(1000).toISOString(), envMs: 5, policyMs: 40 },
    attempt: 0,
  };
}

/** Makes the run folder under `root`: config.json, transport/, metrics.jsonl, report.html. */
export async function makeTestRun(root: string, options: { steps?: number; extra?: number } = {}): Promise<TestRun> {
  const steps = options.steps ?? 2;
  const extra = options.extra ?? 0;
  const groupsPerStep = 2;
  const runDir = join(root, "run");
  mkdirSync(runDir, { recursive: true });
  const codec = ChatCodec.fromTokenizerJson(JSON.parse(readFileSync(TOKENIZER, "utf8")));
  const model = {
    vocabSize: 1024,
    dModel: 16,
    layers: 1,
    heads: 2,
    kvHeads: 1,
    ffnHidden: 32,
    contextLength: 512,
  };
  const config = parseConfig({
    experimentId: "viewtest",
    policy: { backend: "cpu", model },
    rollout: { groupSize: 2, maxTotalTokens: 512, maxTokensPerTurn: 64 },
    transport: { localDir: join(runDir, "transport"), visibilityTimeoutSeconds: 5 },
    trainer: { batchSize: groupsPerStep, warmupFactor: 1, maxSteps: steps, learningRate: 1e-2, klCoef: 0 },
  });
  writeFileSync(join(runDir, "config.json"), `${JSON.stringify(config, null, 2)}\n`);
  const transport = await createTransport(config.transport);
  try {
    await initBackend("cpu");
    const policy = createPolicy(model, 1, { version: 0 });
    await saveCheckpoint(transport.store("checkpoints"), policy, {
      version: 0,
      step: 0,
      parent: null,
      tokenizerJson: codec.tokenizer.toText(),
    });
    policy.dispose();
    const batch = (step: number) =>
      Array.from({ length: groupsPerStep }, (_, g) => step * groupsPerStep + g).flatMap((group) =>
        [0, 1].map((sample) => trajectory(codec, config.experimentId, group, sample)),
      );
    const trained = Array.from({ length: steps }, (_, s) => batch(s)).flat();
    await deliver(transport, batch(0));
    const metricsFile = join(runDir, "metrics.jsonl");
    await runTrainer(config, transport, {
      waitSeconds: 0,
      metrics: (line) => appendFileSync(metricsFile, `${JSON.stringify(line)}\n`),
      onStep: (info) => {
        if (info.step < steps) void deliver(transport, batch(info.step));
      },
    });
    // Delivered, never trained: written straight into the store's folder (thousands of fsyncs would be slow).
    const objects = join(config.transport.localDir, "objects", "trajectories");
    const template = trained[0] as Trajectory;
    for (let i = 0; i < extra; i++) {
      // the first trajectory's tokens under new ids (encoding thousands of chats would dominate the test)
      const group = 1000 + Math.floor(i / 2);
      const task = group % 2 === 0 ? "db" : "os";
      const groupId = `${config.experimentId}-${task}-${group}`;
      const sample = i % 2;
      const reward = sample === 0 ? 1 : 0;
      const trajectoryId = `${groupId}-s${sample}`;
      const t = { ...template, groupId, task, index: group, sample, trajectoryId, reward, envReward: reward };
      const file = join(objects, `trajectories/${t.experimentId}/${t.groupId}/${t.trajectoryId}.json`);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, JSON.stringify(t));
    }
    await writeRunReport(runDir, [], [["experiment", config.experimentId]]);
    return { runDir, config, trained, extra };
  } finally {
    await transport.close();
  }
}
