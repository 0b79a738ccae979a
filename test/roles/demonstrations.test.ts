import { afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { loadTaskModule } from "../../env-images/registry.ts";
import { ChatCodec } from "../../shared/chat/index.ts";
import { type ExperimentConfigInput, parseConfig } from "../../shared/config/index.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import type { TrainablePolicy } from "../../shared/model/types.ts";
import type { StepMetrics } from "../../shared/protocol/metrics.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { collectExpertTraces } from "../../trainer-image/sft/sft.ts";
import {
  type Demonstration,
  type DemonstrationTrace,
  demonstrationRows,
  demonstrationsOfStep,
  demonstrationTokens,
  encodeDemonstrations,
} from "../../trainer-image/trainer/demonstrations.ts";
import { runTrainer, TrainerError } from "../../trainer-image/trainer/trainer.ts";
import { agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";
import { deliver, fakeTrajectory, publishBase, TINY_MODEL, tinyTrainerConfig } from "./trainerHelpers.ts";

/** The trainer tests' tiny model with room for whole expert episodes (about 450-560 tokens each). */
const MODEL = { ...TINY_MODEL, vocabSize: 1024, contextLength: 1024 };

/** Real expert episodes (db and os, training split) and a tokenizer trained on them. */
let traces: DemonstrationTrace[];
let codec: ChatCodec;

beforeAll(async () => {
  const tasks = await Promise.all(["db", "os"].map((name) => loadTaskModule(name)));
  traces = (await collectExpertTraces(tasks, 6, 1)).traces;
  codec = ChatCodec.train(traces, MODEL.vocabSize);
});

describe("demonstrations: encoding and the seeded draw", () => {
  it("tokenizes each trace with the policy's codec, 1 exactly on its assistant tokens", () => {
    const encoded = encodeDemonstrations(traces, codec, 4096);
    expect(encoded).toHaveLength(traces.length);
    const first = encoded[0] as Demonstration;
    const reference = codec.encodeConversation(traces[0]?.messages ?? [], traces[0]?.tools);
    expect([...first.tokens]).toEqual(reference.tokens);
    expect([...first.weights]).toEqual(reference.lossMask);
    expect(demonstrationTokens([first])).toBe(reference.lossMask.filter((m) => m === 1).length);
    expect(demonstrationTokens([first])).toBeGreaterThan(0);
  });

  it("leaves out a trace longer than the context", () => {
    const lengths = encodeDemonstrations(traces, codec, 4096).map((d) => d.tokens.length);
    const cut = [...lengths].sort((a, b) => a - b)[Math.floor(lengths.length / 2)] as number;
    const kept = encodeDemonstrations(traces, codec, cut);
    expect(kept.length).toBe(lengths.filter((n) => n <= cut).length);
    expect(kept.length).toBeLessThan(traces.length);
  });

  it("draws distinct demonstrations per step from the seed: the same again for the same seed and step", () => {
    const all = encodeDemonstrations(traces, codec, 4096);
    const a = demonstrationsOfStep(all, 4, 1, 7);
    expect(new Set(a).size).toBe(4);
    expect(demonstrationsOfStep(all, 4, 1, 7)).toEqual(a);
    const others = [8, 9, 10].map((step) => demonstrationsOfStep(all, 4, 1, step));
    expect(others.some((b) => b.some((d, i) => d !== a[i]))).toBe(true);
    expect(demonstrationsOfStep(all, all.length + 5, 1, 1)).toHaveLength(all.length); // never more than there are
  });

  it("demonstration rows carry no policy, KL or agreement term: only their imitation weights", () => {
    const [row] = demonstrationRows(encodeDemonstrations(traces.slice(0, 1), codec, 4096));
    expect(row?.advantages.every((a) => a === 0)).toBe(true);
    expect(row?.lossMask.every((m) => m === 0)).toBe(true);
    expect(row?.fresh.every((f) => f === 0)).toBe(true);
    expect(row?.demonstration?.some((w) => w === 1)).toBe(true);
  });

  it("the config refuses a negative weight or an empty draw, naming the field", () => {
    expect(parseConfig({}).trainer.demonstrations).toEqual({
      coef: 0,
      perStep: 8,
      episodesPerTask: 400,
      alone: false,
    });
    expect(() => parseConfig({ trainer: { demonstrations: { alone: true } } })).toThrow(
      /trainer\.demonstrations\.alone: trains on the demonstrations alone, so needs trainer\.demonstrations\.coef above 0/,
    );
    expect(() => parseConfig({ trainer: { demonstrations: { coef: -1 } } })).toThrow(/trainer\.demonstrations\.coef/);
    expect(() => parseConfig({ trainer: { demonstrations: { perStep: 0 } } })).toThrow(
      /trainer\.demonstrations\.perStep/,
    );
  });
});

describe("runTrainer with trainer.demonstrations", () => {
  let dir: string;
  let transport: Transport;
  const config = (overrides: ExperimentConfigInput = {}) =>
    tinyTrainerConfig(dir, { policy: { backend: "cpu", model: MODEL }, ...overrides });
  /** Which sample of each group succeeds: flipping it reverses every advantage of the RL term. */
  let winner = 0;
  const batchOf = (step: number) =>
    [0, 1].flatMap((g) =>
      [0, 1].map((sample) =>
        fakeTrajectory("tr", `s${step}g${g}`, sample, sample === winner ? 1 : -0.2, { task: g === 0 ? "db" : "os" }),
      ),
    );

  /** Mean negative log-likelihood of every demonstration's assistant tokens under `policy`. */
  const imitationLoss = (policy: TrainablePolicy): number => {
    const all = encodeDemonstrations(traces, codec, MODEL.contextLength);
    expect(all).toHaveLength(traces.length);
    const logps = policy.logProbs(
      all.map((d) => d.tokens),
      1,
    );
    let sum = 0;
    all.forEach((d, i) => {
      d.weights.forEach((w, t) => {
        sum -= w * ((logps[i] as Float32Array)[t] as number);
      });
    });
    return sum / demonstrationTokens(all);
  };

  /** Trains `steps` steps on the same fake batches; returns each step's metrics and the first and last versions' imitation losses. */
  const train = async (trainer: ExperimentConfigInput["trainer"], demonstrations?: DemonstrationTrace[], steps = 3) => {
    await deliver(transport, batchOf(0));
    const lines: StepMetrics[] = [];
    await runTrainer(config({ trainer: { mode: "sync", maxSteps: steps, ...trainer } }), transport, {
      waitSeconds: 0,
      ...(demonstrations ? { demonstrations } : {}),
      metrics: (line) => void lines.push(line),
      onStep: (info) => {
        if (info.step < steps) void deliver(transport, batchOf(info.step));
      },
    });
    const losses = await Promise.all(
      [0, steps].map(async (version) => {
        const { policy } = await loadCheckpoint(transport.store("checkpoints"), version);
        const loss = imitationLoss(policy);
        policy.dispose();
        return loss;
      }),
    );
    return { lines, before: losses[0] as number, after: losses[1] as number };
  };

  /** A fresh run folder whose v0 is an untrained MODEL with the traces' tokenizer. */
  const freshRun = async (prefix: string): Promise<void> => {
    dir = tempDir(prefix);
    transport = await createTransport(config().transport);
    await publishBase(transport, 0, { model: MODEL, tokenizerJson: codec.tokenizer.toText() });
  };

  beforeEach(() => {
    winner = 0;
    return freshRun("trainer-demo-");
  });
  afterEach(async () => {
    await transport.close();
  });

  it("imitates the expert beside the policy term: the demonstrations' loss falls, and is reported each step", async () => {
    const { lines, before, after } = await train({ demonstrations: { coef: 1, perStep: 2 } }, traces);
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      expect(line.metrics["loss/demonstration"]).toBeGreaterThan(0);
      expect(line.metrics["demonstrations/tokens"]).toBeGreaterThan(0);
      expect(Number.isFinite(line.metrics["loss/policy"])).toBe(true);
    }
    expect(after).toBeLessThan(before - 0.3); // 6.94 -> 6.48 when written
  });

  it("off (coef 0, the default) the same batches leave the demonstrations' loss where it was, and no imitation metric", async () => {
    const { lines, before, after } = await train({}, traces);
    expect(lines.every((line) => line.metrics["loss/demonstration"] === undefined)).toBe(true);
    expect(Math.abs(after - before)).toBeLessThan(0.01); // 3e-4 when written
  });

  it("alone, the RL loss trains nothing: reversed rewards leave the next step's imitation loss the same", async () => {
    /** Step 2's demonstration loss (after one update) with the batches' rewards as they are, then reversed. */
    const secondStep = async (alone: boolean): Promise<[number, number]> => {
      const losses: number[] = [];
      for (const w of [0, 1]) {
        winner = w;
        await transport.close();
        await freshRun(`trainer-demo-alone-${w}-`);
        const { lines } = await train({ demonstrations: { coef: 1, perStep: 2, alone } }, traces, 2);
        expect(Number.isFinite(lines[1]?.metrics["loss/policy"])).toBe(true); // still computed, for the metrics
        losses.push(lines[1]?.metrics["loss/demonstration"] as number);
      }
      return losses as [number, number];
    };
    const [asIs, reversed] = await secondStep(true);
    expect(reversed).toBeCloseTo(asIs, 6);
    // beside the RL loss the rewards do move the weights the demonstrations are scored with
    const [withRl, withRlReversed] = await secondStep(false);
    expect(Math.abs(withRlReversed - withRl)).toBeGreaterThan(1e-4);
  }, 120_000);

  it("two training threads compute the same imitation term as one", async () => {
    const one = await train({ dataParallel: 1, demonstrations: { coef: 1, perStep: 2 } }, traces, 2);
    await transport.close();
    await freshRun("trainer-demo-dp2-");
    const two = await train({ dataParallel: 2, demonstrations: { coef: 1, perStep: 2 } }, traces, 2);
    expect(two.lines.map((l) => l.metrics["time/train_threads"])).toEqual([2, 2]);
    two.lines.forEach((line, i) => {
      for (const key of ["loss/demonstration", "loss/policy", "loss/total"])
        expect(line.metrics[key], key).toBeCloseTo(one.lines[i]?.metrics[key] as number, 4);
    });
    expect(two.after).toBeCloseTo(one.after, 3);
  });

  it("refuses to start with a weight but nothing to imitate, saying what to do", async () => {
    await expect(runTrainer(config({ trainer: { demonstrations: { coef: 0.5 } } }), transport)).rejects.toThrow(
      TrainerError,
    );
    await expect(runTrainer(config({ trainer: { demonstrations: { coef: 0.5 } } }), transport)).rejects.toThrow(
      /trainer\.demonstrations\.coef is 0\.5 but there are no expert episodes.*agentrl trainer/,
    );
  });

  it("`agentrl trainer` refuses a weight on a mix task with no expert, naming the field and the tasks that have one", async () => {
    const localDir = tempDir("trainer-demo-cli-");
    const result = await agentrl([
      "trainer",
      "--set",
      "trainer.demonstrations.coef=1",
      "--set",
      'tasks.mix=[{"name":"webarena"},{"name":"db"}]',
      "--set",
      `transport.localDir=${localDir}/transport`,
    ]);
    expect(result.status).toBe(2);
    expect(result.stderr).toContain(
      "trainer.demonstrations.coef: is 1, but task(s) webarena of tasks.mix have no expert",
    );
    expect(result.stderr).toMatch(/tasks with one: .*\bdb\b.*\bos\b/);
  });
});
