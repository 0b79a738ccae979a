import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { callTool } from "../../env-images/common/agent.ts";
import { taskModule as example } from "../../env-images/example/index.ts";
import { loadTaskModule } from "../../env-images/registry.ts";
import { ChatCodec } from "../../shared/chat/index.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { createLogger } from "../../shared/log.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { initBackend } from "../../shared/model/index.ts";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import { copyDrill, pathDrill, RECALL_PAIRS, recallDrill } from "../../trainer-image/sft/copy-drills.ts";
import {
  blindTrace,
  collectExpertTraces,
  finalTurnOnly,
  proseTrace,
  runSft,
  type SftOptions,
  type SftResult,
  weightFinalTurn,
} from "../../trainer-image/sft/sft.ts";
import { tempDir } from "../support/tmp.ts";

const config = parseConfig({
  policy: {
    backend: "wasm",
    model: { vocabSize: 400, dModel: 16, layers: 1, heads: 2, kvHeads: 1, ffnHidden: 32, contextLength: 1024 },
  },
  rollout: { maxTotalTokens: 1024, maxTokensPerTurn: 64 },
});
const log = createLogger({ role: "test" });

describe("sft warm-up", () => {
  let dir: string;
  const run = (name: string, seed: number, more: Partial<SftOptions> = {}): Promise<SftResult> =>
    runSft({
      config,
      tasks: [example],
      episodesPerTask: 4,
      steps: 5,
      seed,
      batchSize: 3,
      learningRate: 1e-2,
      store: new LocalObjectStore(join(dir, name)),
      log,
      recipe: "test",
      ...more,
    });

  beforeAll(async () => {
    await initBackend("wasm");
    dir = tempDir("sft-");
  });

  it("collects the same expert episodes for the same seed, and only successful ones", async () => {
    const a = await collectExpertTraces([example], 5, 11);
    const b = await collectExpertTraces([example], 5, 11);
    const c = await collectExpertTraces([example], 5, 12);
    expect(a.traces.map((t) => t.index)).toEqual(b.traces.map((t) => t.index));
    expect(a.traces.map((t) => t.index)).not.toEqual(c.traces.map((t) => t.index));
    expect(a.stats.get("example")).toEqual({ episodes: 5, kept: a.traces.length });
    for (const trace of a.traces) expect(trace.messages.some((m) => m.role === "assistant")).toBe(true);
  });

  it("leaves out the episodes of the kinds it is told, still drawing as many of the others, and refuses an unknown kind", async () => {
    const db = await loadTaskModule("db");
    const all = await collectExpertTraces([db], 40, 11);
    const kindsOf = (traces: readonly { index: number }[]) => new Set(traces.map((t) => db.task.categoryOf?.(t.index)));
    expect(kindsOf(all.traces).has("lookup")).toBe(true);
    // With nothing left out, the draws are those of the plain call (earlier recipes stay reproducible).
    expect((await collectExpertTraces([db], 40, 11, [])).traces.map((t) => t.index)).toEqual(
      all.traces.map((t) => t.index),
    );
    const without = await collectExpertTraces([db], 40, 11, ["lookup", "count_range"]);
    expect(without.stats.get("db")?.episodes).toBe(40);
    const kinds = kindsOf(without.traces);
    expect(kinds.has("lookup") || kinds.has("count_range")).toBe(false);
    expect(kinds.has("count")).toBe(true);
    const everyKind = "argextreme count count_range delete extreme filter insert lookup sum update_group update_one";
    await expect(collectExpertTraces([db], 5, 11, everyKind.split(" "))).rejects.toThrow(
      /every kind of db is left out \(argextreme, .*\): keep one of its kinds, or leave db out of the tasks/,
    );
    await expect(collectExpertTraces([db], 40, 11, ["lookp"])).rejects.toThrow(
      /has kind lookp; their kinds: argextreme, count, count_range, delete, extreme, filter, insert, lookup/,
    );
  });

  it("lowers the assistant-token loss, writes a loadable v0 with its tokenizer, and is reproducible from the seed", async () => {
    const first = await run("a", 5);
    expect(first.lossAfter).toBeLessThan(first.lossBefore);
    expect(first.losses).toHaveLength(5);
    expect(first.manifest).toMatchObject({ version: 0, parent: null });
    expect(first.manifest.metrics["sft/loss_after"]).toBeCloseTo(first.lossAfter, 6);

    const store = new LocalObjectStore(join(dir, "a"));
    const loaded = await loadCheckpoint(store, "newest");
    expect(loaded.config).toEqual(config.policy.model);
    const codec = ChatCodec.fromTokenizerJson(JSON.parse(loaded.tokenizerJson));
    expect(codec.tokenizer.size).toBeLessThanOrEqual(config.policy.model.vocabSize);
    expect(codec.decode(codec.encode("take_action"))).toBe("take_action");
    loaded.policy.dispose();
    const recipe = JSON.parse((await store.getText("sft/v0.json")) ?? "{}") as { recipe: string; losses: number[] };
    expect(recipe.recipe).toBe("test");
    expect(recipe.losses).toEqual(first.losses);

    const weights = (r: SftResult) => r.manifest.files.find((f) => f.name === "weights.safetensors")?.sha256;
    const again = await run("b", 5);
    expect(weights(again)).toBe(weights(first));
    expect(again.losses).toEqual(first.losses);
    const other = await run("c", 6);
    expect(weights(other)).not.toBe(weights(first));
  });

  it("continues from an earlier warm-up: its weights and tokenizer, byte for byte, then the decayed learning rate", async () => {
    const first = await run("base", 5);
    const init = new LocalObjectStore(join(dir, "base"));
    // Another config shape: the checkpoint's own shape must win.
    const wider = parseConfig({
      ...config,
      policy: { ...config.policy, model: { ...config.policy.model, dModel: 32 } },
    });
    const constant = await run("constant", 5, { init, steps: 3, config: wider });
    const decayed = await run("decayed", 5, { init, steps: 3, finalLearningRate: 1e-6 });

    // Same seed, same traces, same loss sample: the continuation starts where the first run ended.
    expect(constant.lossBefore).toBeCloseTo(first.lossAfter, 5);
    const tokenizer = async (name: string) =>
      (await loadCheckpoint(new LocalObjectStore(join(dir, name)), "newest")).tokenizerJson;
    expect(await tokenizer("constant")).toBe(await tokenizer("base"));
    const continued = await loadCheckpoint(new LocalObjectStore(join(dir, "constant")), "newest");
    expect(continued.config).toEqual(config.policy.model);
    continued.policy.dispose();

    // Step 1 runs at --lr in both; later steps differ only through the schedule.
    expect(decayed.losses[0]).toBe(constant.losses[0]);
    expect(decayed.losses[2]).not.toBe(constant.losses[2]);
    const recipe = JSON.parse((await init.getText("sft/v0.json")) ?? "{}") as { finalLearningRate: number };
    expect(recipe.finalLearningRate).toBe(1e-2);
    const decayedRecipe = JSON.parse(
      (await new LocalObjectStore(join(dir, "decayed")).getText("sft/v0.json")) ?? "{}",
    ) as { finalLearningRate: number };
    expect(decayedRecipe.finalLearningRate).toBe(1e-6);
  });

  it("data-parallel over 2 threads: the losses and weights of one thread within float tolerance, schedule included", async () => {
    const more = { finalLearningRate: 1e-3, answerCrops: 2 };
    const one = await run("dp1", 5, more);
    const two = await run("dp2", 5, { ...more, dataParallel: 2 });
    two.losses.forEach((loss, i) => {
      expect(loss).toBeCloseTo(one.losses[i] as number, 5);
    });
    const values = async (name: string) => {
      const { policy } = await loadCheckpoint(new LocalObjectStore(join(dir, name)), "newest");
      const out = policy.values();
      policy.dispose();
      return out;
    };
    const [a, b] = [await values("dp1"), await values("dp2")];
    let worst = 0;
    for (const [name, x] of a) {
      const y = b.get(name) as Float32Array;
      for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs((x[i] as number) - (y[i] as number)));
    }
    // measured 4.5e-6 (lr 1e-2, 5 steps): float rounding of summing the shards in another order
    expect(worst).toBeLessThan(1e-4);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "dp2")).getText("sft/v0.json")) ?? "{}") as {
      dataParallel: number;
    };
    expect(recipe.dataParallel).toBe(2);
  });

  it("weights only the last assistant turn when told, and trains on that weighted mean", async () => {
    const mask = Float32Array.from([0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0]);
    expect([...weightFinalTurn(mask, 4)]).toEqual([0, 1, 1, 0, 0, 1, 0, 4, 4, 4, 0]);
    expect([...weightFinalTurn(mask, 1)]).toEqual([...mask]);
    expect([...weightFinalTurn(Float32Array.from([0, 0]), 3)]).toEqual([0, 0]);
    expect([...finalTurnOnly(mask)]).toEqual([0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0]);

    const plain = await run("plain", 5, { steps: 2 });
    const weighted = await run("weighted", 5, { steps: 2, finalTurnWeight: 5 });
    // Same batch, another weighting: the first step's loss (before any update) differs.
    expect(weighted.losses[0]).not.toBeCloseTo(plain.losses[0] as number, 4);
    // The before/after measure stays the unweighted one, so runs compare.
    expect(weighted.lossBefore).toBeCloseTo(plain.lossBefore, 6);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "weighted")).getText("sft/v0.json")) ?? "{}") as {
      finalTurnWeight: number;
    };
    expect(recipe.finalTurnWeight).toBe(5);
  });

  it("trains on answer-resampled variants beside the traces, and measures the loss on the originals", async () => {
    const plain = await run("no-variants", 5, { steps: 2 });
    const varied = await run("variants", 5, { steps: 2, answerVariants: 2 });
    // The example task's answer is copied from the add tool's output: every trace has variants
    // (a one-digit sum can be redrawn as itself, leaving fewer).
    expect(plain.variants).toBe(0);
    const kept = varied.traces.reduce((sum, t) => sum + t.kept, 0);
    expect(varied.variants).toBeGreaterThan(kept);
    expect(varied.variants).toBeLessThanOrEqual(2 * kept);
    // Trace statistics and the before/after loss sample stay on the original traces.
    expect(varied.traces).toEqual(plain.traces);
    expect(varied.lossBefore).toBeCloseTo(plain.lossBefore, 6);
    // Batches now draw from the variants too.
    expect(varied.losses).not.toEqual(plain.losses);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "variants")).getText("sft/v0.json")) ?? "{}") as {
      answerVariants: number;
      variants: number;
    };
    expect(recipe).toMatchObject({ answerVariants: 2, answerResample: "pool", variants: varied.variants });
  });

  it("trains on question-renamed variants beside the traces of a task whose actions spell its question's words", async () => {
    const db = await loadTaskModule("db");
    const base = { tasks: [db], episodesPerTask: 3, steps: 1 };
    const plain = await run("db-plain", 5, base);
    const renamed = await run("db-renamed", 5, { ...base, questionVariants: 2 });
    // Every db query spells the question's table name: each trace gets its two variants.
    const kept = renamed.traces.reduce((sum, t) => sum + t.kept, 0);
    expect(kept).toBeGreaterThan(0);
    expect(renamed.questionVariants).toBe(2 * kept);
    expect(plain.questionVariants).toBe(0);
    expect(renamed.traces).toEqual(plain.traces);
    expect(renamed.lossBefore).toBeCloseTo(plain.lossBefore, 6);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "db-renamed")).getText("sft/v0.json")) ?? "{}");
    expect(recipe).toMatchObject({ questionVariantsPerTrace: 2, questionVariants: 2 * kept });
    // With numbers: the same variants, and the update and insert values redrawn too.
    const numbered = await run("db-numbered", 5, { ...base, questionVariants: 2, questionNumbers: true });
    expect(numbered.questionVariants).toBe(2 * kept);
    const numberedRecipe = JSON.parse(
      (await new LocalObjectStore(join(dir, "db-numbered")).getText("sft/v0.json")) ?? "{}",
    );
    expect(numberedRecipe).toMatchObject({ questionNumbers: true });
    // (one of these three traces sets a value the question gives: different data, a different step)
    expect(numbered.losses).not.toEqual(renamed.losses);
    expect(recipe).toMatchObject({ questionNumbers: false });
    // The example task's question words are numbers: nothing to rename.
    expect((await run("example-renamed", 5, { steps: 1, questionVariants: 2 })).questionVariants).toBe(0);
  });

  it("trains on identifier-redrawn variants of the traces whose clicks copy a product id off a page", async () => {
    const [db, webshop] = await Promise.all([loadTaskModule("db"), loadTaskModule("webshop")]);
    // webshop's pages need a longer context than this file's model has
    const long = parseConfig({
      policy: { backend: "wasm", model: { ...config.policy.model, contextLength: 4096 } },
      rollout: { maxTotalTokens: 4096, maxTokensPerTurn: 64 },
    });
    const base = { config: long, tasks: [db, webshop], episodesPerTask: 3, steps: 1 };
    const plain = await run("ids-plain", 5, base);
    const redrawn = await run("ids-redrawn", 5, { ...base, identifierVariants: 2 });
    // Every webshop expert clicks a product by its id; no db action copies an identifier.
    const kept = (task: string) => redrawn.traces.find((t) => t.task === task)?.kept ?? 0;
    expect(kept("webshop")).toBeGreaterThan(0);
    expect(kept("db")).toBeGreaterThan(0);
    expect(redrawn.identifierVariants).toBe(2 * kept("webshop"));
    expect(plain.identifierVariants).toBe(0);
    expect(redrawn.traces).toEqual(plain.traces);
    expect(redrawn.losses).not.toEqual(plain.losses);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "ids-redrawn")).getText("sft/v0.json")) ?? "{}");
    expect(recipe).toMatchObject({ identifierVariantsPerTrace: 2, identifierVariants: 2 * kept("webshop") });
    // Crops that end at each clicked id, the loss on the id alone: more rows per step, other losses.
    const cropped = await run("ids-cropped", 5, { ...base, identifierVariants: 2, identifierCrops: 4 });
    expect(cropped.losses).not.toEqual(redrawn.losses);
    const croppedRecipe = JSON.parse(
      (await new LocalObjectStore(join(dir, "ids-cropped")).getText("sft/v0.json")) ?? "{}",
    );
    expect(croppedRecipe).toMatchObject({ identifierCrops: 4 });
    expect(recipe).toMatchObject({ identifierCrops: 0 });
  });

  it("adds copy drills: a random string, a newline and the string again, the loss on the repeat alone", async () => {
    const { traces } = await collectExpertTraces([example], 3, 11);
    const codec = ChatCodec.train(traces, 400);
    const random = seededRandom(3);
    for (let i = 0; i < 20; i++) {
      const { tokens, weights } = copyDrill(codec, random);
      expect(weights).toHaveLength(tokens.length);
      const start = weights.indexOf(1);
      const text = codec.decode([...tokens]);
      const [first, repeat] = text.split("\n");
      expect(first).toMatch(/^[A-Za-z0-9]{8,32}$/);
      expect(repeat).toBe(first);
      // weight 1 on exactly the repeat's tokens
      expect(codec.decode([...tokens.slice(start)])).toBe(first);
      expect([...weights.slice(start)].every((w) => w === 1)).toBe(true);
      expect([...weights.slice(0, start)].every((w) => w === 0)).toBe(true);
    }
    const plain = await run("drills-plain", 5, { steps: 2 });
    const drilled = await run("drills", 5, { steps: 2, copyDrills: 3 });
    expect(drilled.losses).not.toEqual(plain.losses);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "drills")).getText("sft/v0.json")) ?? "{}");
    expect(recipe).toMatchObject({ copyDrills: 3 });
  });

  it("adds recall drills: a few key-value pairs, one key asked again, the loss on its whole value", async () => {
    const { traces } = await collectExpertTraces([example], 3, 11);
    const codec = ChatCodec.train(traces, 400);
    const random = seededRandom(4);
    let numbers = 0;
    for (let i = 0; i < 40; i++) {
      const { tokens, weights, key, value } = recallDrill(codec, random);
      expect(weights).toHaveLength(tokens.length);
      const start = weights.indexOf(1);
      const [listing, ask] = codec.decode([...tokens.slice(0, start)]).split("\n");
      const pairs = (listing ?? "").split(", ").map((pair) => pair.split(" "));
      expect(pairs.length).toBeGreaterThanOrEqual(RECALL_PAIRS.min);
      expect(pairs.length).toBeLessThanOrEqual(RECALL_PAIRS.max);
      expect(new Set(pairs.map(([k]) => k)).size).toBe(pairs.length);
      // the asked key is listed once, with the value the loss is on
      expect(pairs.filter(([k]) => k === key).map(([, , v]) => v)).toEqual([value]);
      expect(ask).toMatch(new RegExp(`^${key} (:|=|->|>)$`));
      expect(codec.decode([...tokens.slice(start)])).toBe(` ${value}`);
      expect([...weights.slice(start)].every((w) => w === 1)).toBe(true);
      expect([...weights.slice(0, start)].every((w) => w === 0)).toBe(true);
      expect(value).toMatch(/^([A-Za-z]{3,10}|[1-9][0-9]{0,4})$/);
      if (/^[0-9]/.test(value)) numbers += 1;
    }
    expect(numbers).toBeGreaterThan(5);
    expect(numbers).toBeLessThan(35);
    const plain = await run("recall-plain", 5, { steps: 2 });
    const drilled = await run("recall", 5, { steps: 2, recallDrills: 3 });
    expect(drilled.losses).not.toEqual(plain.losses);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "recall")).getText("sft/v0.json")) ?? "{}");
    expect(recipe).toMatchObject({ recallDrills: 3, copyDrills: 0 });
  });

  it("adds path drills: a path whose words recur, a newline and the path again, the loss on the repeat", async () => {
    const { traces } = await collectExpertTraces([example], 3, 11);
    const codec = ChatCodec.train(traces, 400);
    const random = seededRandom(5);
    for (let i = 0; i < 30; i++) {
      const { tokens, weights } = pathDrill(codec, random);
      const start = weights.indexOf(1);
      const [path, repeat] = codec.decode([...tokens]).split("\n");
      expect(path).toMatch(/^(\/[a-z]{2,7}){3,}(\.[a-z]{2,7})?$/);
      expect(repeat).toBe(path);
      // more segments than words: some word recurs
      const words = (path ?? "").split(/[/.]/).filter(Boolean);
      expect(new Set(words).size).toBeLessThan(words.length);
      expect(codec.decode([...tokens.slice(start)])).toBe(path);
      expect([...weights.slice(start)].every((w) => w === 1)).toBe(true);
      expect([...weights.slice(0, start)].every((w) => w === 0)).toBe(true);
    }
    const plain = await run("paths-plain", 5, { steps: 2 });
    const drilled = await run("paths", 5, { steps: 2, pathDrills: 3 });
    expect(drilled.losses).not.toEqual(plain.losses);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "paths")).getText("sft/v0.json")) ?? "{}");
    expect(recipe).toMatchObject({ pathDrills: 3, recallDrills: 0, copyDrills: 0 });
  });

  it("makes a blind trace: the opening messages, then the expert's final turn with no tool call before it", async () => {
    const { traces } = await collectExpertTraces([example], 3, 11);
    const messages = traces[0]?.messages ?? [];
    const blind = blindTrace(messages) ?? [];
    const firstAssistant = messages.findIndex((m) => m.role === "assistant");
    const finalTurn = messages.filter((m) => m.role === "assistant").at(-1);
    expect(firstAssistant).toBeGreaterThan(0);
    expect(blind).toEqual([...messages.slice(0, firstAssistant), finalTurn]);
    expect(blind.some((m) => m.role === "tool")).toBe(false);
    // A trace that answered at once has no blind version.
    expect(blindTrace(blind)).toBeUndefined();
  });

  it("replaces the drawn share of traces by their blind version, from the seed, and records it", async () => {
    const seeing = await run("seeing", 5, { steps: 1 });
    const half = await run("half-blind", 5, { steps: 1, blindShare: 0.5 });
    const again = await run("half-blind-again", 5, { steps: 1, blindShare: 0.5 });
    const all = await run("all-blind", 5, { steps: 1, blindShare: 1 });
    const kept = seeing.traces.reduce((sum, t) => sum + t.kept, 0);
    expect(seeing.blind).toBe(0);
    expect(all.blind).toBe(kept);
    expect(half.blind).toBe(again.blind);
    expect(half.losses).toEqual(again.losses);
    // Blind traces are shorter: no tool call, no observation.
    expect(all.traces[0]?.tokens).toBeLessThan(seeing.traces[0]?.tokens ?? 0);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "all-blind")).getText("sft/v0.json")) ?? "{}") as {
      blindShare: number;
      blind: number;
    };
    expect(recipe).toMatchObject({ blindShare: 1, blind: kept });
  });

  it("makes a prose trace: the final turn states the committed answer in words and calls no tool", () => {
    const opening: ChatMessage[] = [
      { role: "system", content: "sys" },
      { role: "user", content: "How many?" },
      callTool("execute_sql", { query: "SELECT COUNT(*) FROM t" }, 0, "I will run a query."),
      { role: "tool", tool_call_id: "call_0", name: "execute_sql", content: "COUNT(*)\n24\n(1 row)" },
    ];
    const answered = [...opening, callTool("commit_final_answer", { answers: ["24", "7"] }, 1, "The result above.")];
    expect(proseTrace(answered)).toEqual([...opening, { role: "assistant", content: "The answer is 24, 7." }]);
    // A change to the table commits nothing: the prose turn says it is done, still without the call.
    const changed = [...opening, callTool("commit_final_answer", { answers: [] }, 1)];
    expect(proseTrace(changed)).toEqual([...opening, { role: "assistant", content: "The task is done." }]);
    // Integer arguments are answers too (os answer_action takes text; others may not).
    expect(proseTrace([...opening, callTool("answer", { count: 3 }, 1)])?.at(-1)).toEqual({
      role: "assistant",
      content: "The answer is 3.",
    });
    // Already prose: nothing to rewrite.
    expect(proseTrace(proseTrace(answered) ?? [])).toBeUndefined();
  });

  it("draws blind and prose traces from one number per trace, so adding prose keeps the blind draw", async () => {
    const blindOnly = await run("blind-only", 5, { steps: 1, blindShare: 0.5 });
    const both = await run("blind-and-prose", 5, { steps: 1, blindShare: 0.5, proseShare: 0.5 });
    const kept = blindOnly.traces.reduce((sum, t) => sum + t.kept, 0);
    expect(both.blind).toBe(blindOnly.blind);
    expect(both.blind + both.prose).toBe(kept);
    expect(both.prose).toBeGreaterThan(0);
    const recipe = JSON.parse(
      (await new LocalObjectStore(join(dir, "blind-and-prose")).getText("sft/v0.json")) ?? "{}",
    ) as { proseShare: number; prose: number };
    expect(recipe).toMatchObject({ proseShare: 0.5, prose: both.prose });
    await expect(run("too-many-habits", 5, { steps: 1, blindShare: 0.7, proseShare: 0.4 })).rejects.toThrow(
      /blindShare 0.7 \+ proseShare 0.4 is above 1/,
    );
  });

  it("adds answer crops to each step, and records how many", async () => {
    const plain = await run("no-crops", 5, { steps: 2 });
    const cropped = await run("crops", 5, { steps: 2, answerCrops: 4 });
    // Same traces and loss sample, another batch: the crops' answer-turn loss joins the step's mean.
    expect(cropped.lossBefore).toBeCloseTo(plain.lossBefore, 6);
    expect(cropped.losses[0]).not.toBeCloseTo(plain.losses[0] as number, 4);
    const recipe = JSON.parse((await new LocalObjectStore(join(dir, "crops")).getText("sft/v0.json")) ?? "{}") as {
      answerCrops: number;
    };
    expect(recipe.answerCrops).toBe(4);
  });
});
