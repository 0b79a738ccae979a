import { type Command, InvalidArgumentError, Option } from "commander";
import { ValidationError } from "../../shared/errors.ts";
import { createLogger } from "../../shared/log.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";
import { intOption } from "./controller.ts";

interface SftCliOptions {
  config?: string;
  set?: string[];
  tasks?: string[];
  episodes: number;
  withoutKinds?: string[];
  steps: number;
  seed?: number;
  batch: number;
  lr: number;
  lrFinal?: number;
  finalTurnWeight: number;
  answerVariants: number;
  answerResample: "pool" | "recombine";
  answerCrops: number;
  questionVariants: number;
  questionNumbers: boolean;
  idVariants: number;
  idCrops: number;
  copyDrills: number;
  recallDrills: number;
  pathDrills: number;
  blindShare: number;
  proseShare: number;
  dataParallel: number;
  init?: string;
  out?: string;
  store?: boolean;
}

/** `agentrl sft`: the warm-up — behaviour cloning on expert traces, written as checkpoint v0. */
export function register(program: Command): void {
  withConfigOptions(
    program
      .command("sft")
      .description("warm-up: train the tokenizer and a base policy on expert traces, save it as checkpoint v0")
      .option("--tasks <names...>", "tasks whose experts produce traces (default: the config's task mix)")
      .option("--episodes <n>", "expert episodes per task", intOption("--episodes", 1), 40)
      .option(
        "--without-kinds <kinds...>",
        "leave out the expert episodes of these instance kinds (as `agentrl eval` names them, e.g. lookup count_range): a warm-up never shown them",
      )
      .option("--steps <n>", "optimizer steps", intOption("--steps", 1), 200)
      .option("--seed <n>", "seed of episodes, init and batches (default: config seed)", intOption("--seed", 0))
      .option("--batch <n>", "sequences per step", intOption("--batch", 1), 16)
      .option("--lr <x>", "Adam learning rate", floatOption("--lr"), 3e-3)
      .option(
        "--lr-final <x>",
        "learning rate at the last step, reached linearly (default: --lr, constant)",
        floatOption("--lr-final"),
      )
      .option(
        "--final-turn-weight <x>",
        "loss weight of each trace's last assistant turn (the committed answer) against the other assistant tokens",
        floatOption("--final-turn-weight"),
        1,
      )
      .option(
        "--answer-variants <n>",
        "extra copies of each trace with its copied answer value resampled (teaches copying, not guessing)",
        intOption("--answer-variants", 0),
        0,
      )
      .addOption(
        new Option(
          "--answer-resample <how>",
          "how the variants resample a word answer: pool (another answer of the task) or recombine (a new word of the task's answers' syllables, so each piece must be copied)",
        )
          .choices(["pool", "recombine"])
          .default("pool"),
      )
      .option(
        "--answer-crops <n>",
        "extra sequences per step: the last 128 tokens of a trace with a copied answer, loss on the answer only",
        intOption("--answer-crops", 0),
        0,
      )
      .option(
        "--question-variants <n>",
        "extra copies of each trace with the question's words its actions spell (a column, a path) renamed to fresh words throughout (teaches copying the request)",
        intOption("--question-variants", 0),
        0,
      )
      .option(
        "--question-numbers",
        "the question variants also redraw the question's numbers of two or more digits that the actions spell (the value an update sets)",
        false,
      )
      .option(
        "--id-variants <n>",
        "extra copies of each trace with the identifiers its actions copy off a page (a webshop product id) redrawn throughout (teaches copying from the page)",
        intOption("--id-variants", 0),
        0,
      )
      .option(
        "--id-crops <n>",
        "extra sequences per step: the 256 tokens ending with an identifier an action copies off a page (a clicked product id), loss on the identifier only",
        intOption("--id-crops", 0),
        0,
      )
      .option(
        "--copy-drills <n>",
        "extra synthetic sequences per step: a random string of letters and digits, a newline and the string again, loss on the repeat (builds copying)",
        intOption("--copy-drills", 0),
        0,
      )
      .option(
        "--recall-drills <n>",
        "extra synthetic sequences per step: a few `key is value` pairs and one key asked again, loss on its value (builds choosing what to copy)",
        intOption("--recall-drills", 0),
        0,
      )
      .option(
        "--path-drills <n>",
        "extra synthetic sequences per step: a path whose words recur (/a/b/a.c), a newline and the path again, loss on the repeat (builds copying past a recurring token)",
        intOption("--path-drills", 0),
        0,
      )
      .option(
        "--blind-share <p>",
        "share of traces replaced by a blind one: the expert's final turn at once, no tool call (0 to 1)",
        shareOption("--blind-share"),
        0,
      )
      .option(
        "--prose-share <p>",
        "share of traces whose final turn states the answer in words instead of calling the tool (0 to 1)",
        shareOption("--prose-share"),
        0,
      )
      .option(
        "--data-parallel <n>",
        "training threads: each step's rows split over them, one Adam step (2 uses a second core; same result within float rounding)",
        intOption("--data-parallel", 1, 2),
        1,
      )
      .option("--init <dir>", "continue from the warm-up in this folder (its newest version, weights and tokenizer)")
      .option("--out <dir>", "write policies/v0/ under this folder")
      .option("--store", "write into the experiment's checkpoint store"),
  ).action(async (options: SftCliOptions) => {
    if (Boolean(options.out) === Boolean(options.store))
      throw new ValidationError("sft options", [
        { path: "--out/--store", message: "give exactly one: --out DIR or --store" },
      ]);
    if (options.questionNumbers && options.questionVariants === 0)
      throw new ValidationError("sft options", [
        {
          path: "--question-numbers",
          message: "renames within the question variants: give --question-variants N (N >= 1) too",
        },
      ]);
    if (options.blindShare + options.proseShare > 1)
      throw new ValidationError("sft options", [
        {
          path: "--prose-share",
          message: `--blind-share ${options.blindShare} + --prose-share ${options.proseShare} is above 1 (a trace gets one habit at most)`,
        },
      ]);
    const config = await configFromOptions(options);
    const { TASK_MODULES, loadTaskModule } = await import("../../env-images/registry.ts");
    const available = Object.keys(TASK_MODULES);
    const names = options.tasks ?? config.tasks.mix.map((m) => m.name).filter((n) => available.includes(n));
    const unknown = names.filter((n) => !available.includes(n));
    if (unknown.length > 0 || names.length === 0)
      throw new ValidationError("sft options", [
        {
          path: "--tasks",
          message: `${unknown.length ? `unknown task(s) ${unknown.join(", ")}` : "no task"}; available: ${available.join(", ")}`,
        },
      ]);
    const tasks = await Promise.all(names.map((n) => loadTaskModule(n)));
    const { LocalObjectStore } = await import("../../shared/transport/local.ts");
    let init: ObjectStore | undefined;
    if (options.init) {
      const { newestVersion } = await import("../../shared/protocol/checkpoints.ts");
      init = new LocalObjectStore(options.init);
      if ((await newestVersion(init)) === undefined)
        throw new ValidationError("sft options", [
          { path: "--init", message: `${options.init} holds no checkpoint (expected policies/v<N>/ in it)` },
        ]);
    }
    const log = createLogger({ role: "sft", experimentId: config.experimentId });
    let close = async () => {};
    let store: ObjectStore;
    if (options.out) {
      const folder = new LocalObjectStore(options.out);
      store = folder;
      close = () => folder.removeEmptyTempDir();
    } else {
      const { createTransport } = await import("../../shared/transport/index.ts");
      const transport = await createTransport(config.transport);
      store = transport.store("checkpoints");
      close = () => transport.close();
    }
    const { runSft } = await import("../../trainer-image/sft/sft.ts");
    const seed = options.seed ?? config.seed;
    try {
      const result = await runSft({
        config,
        tasks,
        episodesPerTask: options.episodes,
        withoutKinds: options.withoutKinds,
        steps: options.steps,
        seed,
        batchSize: options.batch,
        learningRate: options.lr,
        finalLearningRate: options.lrFinal,
        finalTurnWeight: options.finalTurnWeight,
        answerVariants: options.answerVariants,
        answerResample: options.answerResample,
        answerCrops: options.answerCrops,
        questionVariants: options.questionVariants,
        questionNumbers: options.questionNumbers,
        identifierVariants: options.idVariants,
        identifierCrops: options.idCrops,
        copyDrills: options.copyDrills,
        recallDrills: options.recallDrills,
        pathDrills: options.pathDrills,
        blindShare: options.blindShare,
        proseShare: options.proseShare,
        dataParallel: options.dataParallel,
        init,
        store,
        log,
        recipe: `agentrl ${process.argv.slice(2).join(" ")}`,
      });
      process.stdout.write(
        `${JSON.stringify({
          event: "sft-done",
          version: result.manifest.version,
          lossBefore: result.lossBefore,
          lossAfter: result.lossAfter,
          trainTokensPerSecond: Math.round(result.trainTokensPerSecond),
          vocabularyUsed: result.vocabularyUsed,
          traces: result.traces,
          variants: result.variants,
          questionVariants: result.questionVariants,
          identifierVariants: result.identifierVariants,
          blind: result.blind,
          prose: result.prose,
        })}\n`,
      );
    } finally {
      await close();
    }
  });
}

function floatOption(flag: string): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === "" || !Number.isFinite(n) || n <= 0)
      throw new InvalidArgumentError(`${flag} must be a number > 0, got "${value}"`);
    return n;
  };
}

function shareOption(flag: string): (value: string) => number {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === "" || !Number.isFinite(n) || n < 0 || n > 1)
      throw new InvalidArgumentError(`${flag} must be a number from 0 to 1, got "${value}"`);
    return n;
  };
}
