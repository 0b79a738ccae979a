import { beforeAll, describe, expect, it } from "vitest";
import { loadTaskModule } from "../../env-images/registry.ts";
import { ChatCodec } from "../../shared/chat/index.ts";
import { type ExperimentConfigInput, parseConfig } from "../../shared/config/index.ts";
import { DataParallelTrainer } from "../../shared/model/dataParallel.ts";
import { createPolicy, initBackend } from "../../shared/model/index.ts";
import type { StepMetrics } from "../../shared/protocol/metrics.ts";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { DEFAULT_PPO_PARAMS } from "../../shared/rl/ppo.ts";
import { seededRandom, seededRandomFrom } from "../../shared/rl/random.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { collectExpertTraces, type ExpertTrace } from "../../trainer-image/sft/sft.ts";
import type { BatchRow, PreparedBatch } from "../../trainer-image/trainer/batch.ts";
import type { LossRow } from "../../trainer-image/trainer/loss.ts";
import ppoShardLoss from "../../trainer-image/trainer/ppoShard.ts";
import { MIN_QUESTIONS, QuestionRenamer, renamedRows } from "../../trainer-image/trainer/renamed.ts";
import { runTrainer } from "../../trainer-image/trainer/trainer.ts";
import { SMALL, tokens } from "../model/support.ts";
import { tempDir } from "../support/tmp.ts";
import { deliver, fakeTrajectory, publishBase, TINY_MODEL, tinyTrainerConfig } from "./trainerHelpers.ts";

/** Real expert episodes of db and os (training split), as rollouts' messages look. */
let traces: ExpertTrace[];
let codec: ChatCodec;

beforeAll(async () => {
  await initBackend("wasm");
  const tasks = await Promise.all(["db", "os"].map((name) => loadTaskModule(name)));
  traces = (await collectExpertTraces(tasks, 24, 3)).traces;
  codec = ChatCodec.train(traces, 1024);
});

const WORD = /[A-Za-z0-9_]+/g;
const wordsOf = (text: string) => new Set(text.match(WORD) ?? []);
const questionOf = (messages: readonly ChatMessage[]) => {
  const user = messages.find((m) => m.role === "user");
  return typeof user?.content === "string" ? user.content : "";
};
const actionsOf = (messages: readonly ChatMessage[]) =>
  messages
    .flatMap((m) => (m.role === "assistant" ? (m.tool_calls ?? []).map((c) => c.function.arguments) : []))
    .join(" ");

describe("QuestionRenamer", () => {
  it("reads each task's frame words from the questions it has seen: the wording, not the instance", () => {
    const renamer = new QuestionRenamer();
    renamer.observe(traces);
    const db = renamer.frameOf("db");
    for (const word of ["name", "table", "headers"]) expect(db.has(word), word).toBe(true);
    // an instance's table name is in a few questions, never half of them
    const tables = traces
      .filter((t) => t.task === "db")
      .map((t) => /name of this table is (\w+)/.exec(questionOf(t.messages))?.[1]);
    expect(tables.some((t) => t !== undefined)).toBe(true);
    for (const table of tables) if (table) expect(db.has(table), table).toBe(false);
    expect(renamer.frameOf("never-seen").size).toBe(0);
  });

  it("renames the question's words the actions copy, in the question, the actions and the observations alike", () => {
    const renamer = new QuestionRenamer();
    renamer.observe(traces);
    let renamed = 0;
    for (const trace of traces) {
      const variant = renamer.variantOf(trace, seededRandomFrom(1, trace.index));
      if (!variant) continue;
      renamed += 1;
      expect(variant[0]).toEqual(trace.messages[0]); // the system prompt stays
      const before = wordsOf(questionOf(trace.messages));
      const after = wordsOf(questionOf(variant));
      const fresh = [...after].filter((w) => !before.has(w));
      const gone = [...before].filter((w) => !after.has(w));
      expect(fresh.length).toBeGreaterThan(0);
      expect(fresh).toHaveLength(gone.length);
      const actions = wordsOf(actionsOf(variant));
      for (const word of fresh) expect(actions.has(word), `${word} in ${actionsOf(variant)}`).toBe(true);
      for (const word of gone) expect(actions.has(word), `${word} left in ${actionsOf(variant)}`).toBe(false);
      // frame words stay
      for (const word of renamer.frameOf(trace.task)) if (before.has(word)) expect(after.has(word)).toBe(true);
    }
    expect(renamed).toBeGreaterThan(traces.length / 2);
  });

  it("has no copy of an episode whose actions copy no word of its question", () => {
    const renamer = new QuestionRenamer();
    renamer.observe(traces);
    const trace = traces[0] as ExpertTrace;
    const prose = trace.messages.map(
      (m): ChatMessage => (m.role === "assistant" ? { role: "assistant", content: "I do not know." } : m),
    );
    expect(renamer.variantOf({ ...trace, messages: prose }, seededRandom(1))).toBeUndefined();
  });
});

describe("renamedRows", () => {
  /** A batch whose row `i` trains trajectory `i` with `advantages[i]` on its assistant tokens. */
  const batchOf = (advantages: readonly number[]): PreparedBatch => ({
    rows: advantages.map((advantage, i): BatchRow => {
      const { tokens: ids, lossMask } = codec.encodeConversation(traces[i]?.messages ?? [], traces[i]?.tools);
      return {
        trajectory: i,
        tokens: Int32Array.from(ids),
        lossMask,
        oldLogp: lossMask.map(() => 0),
        fullLogp: lossMask.map(() => 0),
        advantages: lossMask.map((m) => (m ? advantage : 0)),
        pastBound: lossMask.map(() => 0),
        fresh: lossMask.map(() => 0),
      };
    }),
    trajectoryAdvantages: [...advantages],
    tokens: 0,
    staleness: [],
    metrics: {},
  });
  const renamer = () => {
    const r = new QuestionRenamer();
    r.observe(traces);
    return r;
  };
  const copies = (
    advantages: readonly number[],
    options: { count?: number; seed?: number; context?: number; negative?: number } = {},
  ) =>
    renamedRows(batchOf(advantages), traces, renamer(), codec, {
      count: options.count ?? 2,
      contextLength: options.context ?? 4096,
      random: seededRandomFrom(options.seed ?? 1, "renamed"),
      trainer: { negativeAdvantageWeight: options.negative ?? 1 },
    });

  it("gives every trajectory with an advantage `count` copies carrying it on their assistant tokens; none to a zero advantage", () => {
    // the first three traces are db episodes whose queries copy the question's words
    expect(traces.slice(0, 3).every((t) => t.task === "db" && renamer().variantOf(t, seededRandom(1)))).toBe(true);
    const out = copies([0.75, 0, -0.5], { negative: 0.5 });
    expect(out.rows).toHaveLength(4);
    expect(out.sequences).toHaveLength(4);
    expect(out.renamedTrajectories).toBe(2);
    const weights = out.rows.map((row) => new Set([...(row.reinforce ?? [])].filter((w) => w !== 0)));
    expect(weights.map((w) => [...w])).toEqual([[0.75], [0.75], [-0.25], [-0.25]]);
    let trained = 0;
    out.rows.forEach((row, i) => {
      const sequence = out.sequences[i] as Int32Array;
      expect(row.reinforce).toHaveLength(sequence.length);
      expect(row.reinforce?.[0]).toBe(0); // position 0 has no log-prob
      // no PPO, KL or agreement term: the copy was never sampled
      for (const column of [row.advantages, row.lossMask, row.fresh]) expect(column.every((x) => x === 0)).toBe(true);
      trained += [...(row.reinforce ?? [])].filter((w) => w !== 0).length;
    });
    expect(out.tokens).toBe(trained);
    // a copy is another sequence than its trajectory's, and the two copies of one differ
    const original = batchOf([0.8]).rows[0]?.tokens as Int32Array;
    expect([...(out.sequences[0] as Int32Array)]).not.toEqual([...original]);
    expect([...(out.sequences[0] as Int32Array)]).not.toEqual([...(out.sequences[1] as Int32Array)]);
  });

  it("draws the same copies from the same seed and others from another", () => {
    const a = copies([1, 1], { seed: 4 });
    expect(copies([1, 1], { seed: 4 }).sequences.map((s) => [...s])).toEqual(a.sequences.map((s) => [...s]));
    expect(copies([1, 1], { seed: 5 }).sequences.map((s) => [...s])).not.toEqual(a.sequences.map((s) => [...s]));
  });

  it("leaves out a copy longer than the context", () => {
    const out = copies([1], { count: 1, context: 16 });
    expect(out.rows).toHaveLength(0);
    expect(out.tokens).toBe(0);
  });
});

describe("the renamed copies' loss term", () => {
  it("moves the weights as the PPO term does at ratio 1, gradient norm included", async () => {
    const OPTIMIZER = { learningRate: 1e-2, microBatchTokens: 64 };
    const sequences = [40, 12, 33, 25].map((n, i) => tokens(n, i));
    const advantages = [0.9, -0.4, 1.3, -1.1];
    const masks = sequences.map((s, i) => Array.from(s, (_, t): number => (t > 0 && (t + i) % 3 !== 0 ? 1 : 0)));
    const count = masks.reduce((sum, m) => sum + m.reduce((a, b) => a + b, 0), 0);
    const zeros = (s: Int32Array) => Array.from(s, () => 0);
    /** Rows 1 and 3 as renamed copies (`asCopies`) or as sampled rows whose behaviour log-probs are the policy's own. */
    const step = async (asCopies: boolean) => {
      const policy = createPolicy(SMALL, 5, { optimizer: OPTIMIZER });
      const trainer = await DataParallelTrainer.start(policy, { threads: 1, loss: ppoShardLoss });
      try {
        const current = policy.logProbs(sequences, 1);
        const rows: LossRow[] = sequences.map((s, i) => {
          const mask = masks[i] as number[];
          const advantage = advantages[i] as number;
          if (asCopies && i % 2 === 1)
            return {
              oldLogp: zeros(s),
              advantages: zeros(s),
              lossMask: zeros(s),
              fresh: zeros(s),
              fullLogp: zeros(s),
              reinforce: Float32Array.from(mask, (m) => m * advantage),
            };
          return {
            oldLogp: Array.from(current[i] as Float32Array),
            advantages: mask.map((m) => m * advantage),
            lossMask: mask,
            fresh: zeros(s),
            fullLogp: zeros(s),
          };
        });
        const result = await trainer.trainStep(sequences, 1, {
          rows,
          params: { ...DEFAULT_PPO_PARAMS, klCoef: 0 },
          tokens: count,
          captureLogp: false,
        });
        return { gradNorm: result.gradNorm, reinforce: result.stats.sums.reinforce, values: policy.values() };
      } finally {
        await trainer.close();
        policy.dispose();
      }
    };
    const ppo = await step(false);
    const copied = await step(true);
    expect(ppo.reinforce).toBe(0);
    expect(copied.reinforce).not.toBe(0);
    expect(Math.abs(copied.gradNorm - ppo.gradNorm) / ppo.gradNorm).toBeLessThan(1e-4);
    let worst = 0;
    let moved = 0;
    const init = createPolicy(SMALL, 5).values();
    for (const [name, x] of ppo.values) {
      const y = copied.values.get(name) as Float32Array;
      const x0 = init.get(name) as Float32Array;
      x.forEach((v, i) => {
        worst = Math.max(worst, Math.abs(v - (y[i] as number)));
        moved = Math.max(moved, Math.abs(v - (x0[i] as number)));
      });
    }
    expect(moved).toBeGreaterThan(1e-3); // the step did move the weights
    expect(worst).toBeLessThan(OPTIMIZER.learningRate / 100);
  });
});

describe("runTrainer with trainer.renamedVariants", () => {
  /** The trainer tests' tiny model with room for whole expert episodes. */
  const MODEL = { ...TINY_MODEL, vocabSize: 1024, contextLength: 1024 };

  /** Trains three steps, each of three groups of two per task (one sample rewarded); returns each step's metrics. */
  const train = async (renamedVariants?: number) => {
    const dir = tempDir("trainer-renamed-");
    const overrides: ExperimentConfigInput = { policy: { backend: "cpu", model: MODEL } };
    const config = tinyTrainerConfig(dir, overrides);
    const transport = await createTransport(config.transport);
    const byTask = (task: string) => traces.filter((t) => t.task === task);
    try {
      await publishBase(transport, 0, { model: MODEL, tokenizerJson: codec.tokenizer.toText() });
      /** Step `step`'s groups: each a trace of its own, so each task has three new questions per step. */
      const batchOf = (step: number) =>
        ["db", "os"].flatMap((task) =>
          [0, 1, 2].flatMap((g) => {
            const trace = byTask(task)[3 * step + g] as ExpertTrace;
            return [0, 1].map((sample) => {
              const t = fakeTrajectory("tr", `s${step}${task}${g}`, sample, sample === 0 ? 1 : -0.2, { task });
              return { ...t, messages: [...trace.messages], tools: [...trace.tools] };
            });
          }),
        );
      await deliver(transport, batchOf(0));
      const lines: StepMetrics[] = [];
      const trainer = renamedVariants === undefined ? {} : { renamedVariants };
      await runTrainer(
        tinyTrainerConfig(dir, { ...overrides, trainer: { mode: "sync", batchSize: 6, maxSteps: 3, ...trainer } }),
        transport,
        {
          waitSeconds: 0,
          metrics: (line) => void lines.push(line),
          onStep: (info) => {
            if (info.step < 3) void deliver(transport, batchOf(info.step));
          },
        },
      );
      return lines;
    } finally {
      await transport.close();
    }
  };

  it("trains each step's renamed copies beside its trajectories once each task has had enough questions, and reports them", async () => {
    expect(3 * 3).toBeGreaterThanOrEqual(MIN_QUESTIONS);
    const lines = await train(2);
    expect(lines).toHaveLength(3);
    const [first, second, third] = lines.map((line) => line.metrics);
    // 3 and then 6 distinct questions per task: too few to tell the frame words from
    for (const metrics of [first, second]) expect(metrics?.["renamed/rows"]).toBe(0);
    // 9: every trajectory has an advantage; most copy a question word into their actions
    expect(third?.["renamed/trajectories"]).toBeGreaterThanOrEqual(8);
    expect(third?.["renamed/rows"]).toBe(2 * (third?.["renamed/trajectories"] as number));
    expect(third?.["renamed/tokens"]).toBeGreaterThan(0);
    expect(Number.isFinite(third?.["loss/renamed"])).toBe(true);
    expect(third?.["loss/renamed"]).not.toBe(0);
  });

  it("off (0, the default) trains the trajectories alone, with no renamed metric", async () => {
    const lines = await train();
    expect(lines).toHaveLength(3);
    for (const { metrics } of lines) expect(Object.keys(metrics).filter((k) => k.includes("renamed"))).toEqual([]);
  });

  it("the config refuses a negative or too large count, naming the field", () => {
    expect(parseConfig({}).trainer.renamedVariants).toBe(0);
    expect(() => parseConfig({ trainer: { renamedVariants: -1 } })).toThrow(/trainer\.renamedVariants/);
    expect(() => parseConfig({ trainer: { renamedVariants: 9 } })).toThrow(/trainer\.renamedVariants/);
    expect(() => parseConfig({ trainer: { renamedVariants: 1.5 } })).toThrow(/trainer\.renamedVariants/);
  });
});
