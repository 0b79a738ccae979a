import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { beforeAll, describe, expect, it } from "vitest";
import {
  answerStart,
  COPY_RATIO,
  CopyArgsError,
  committedValue,
  identifierLoss,
  identifierTable,
  occursIn,
  parseCopyArgs,
  questionNumbers,
  questionWordPositions,
  questionWordSpans,
  questionWords,
  TASKS,
  verdictOf,
} from "../../bench/copy.ts";
import { runProcess } from "../support/cli.ts";
import { buildTinyBase } from "../support/pipelineRun.ts";
import { tempDir } from "../support/tmp.ts";

const COPY = fileURLToPath(new URL("../../bench/copy.ts", import.meta.url));

function copyProbe(args: readonly string[]) {
  return runProcess(process.execPath, ["--import", "tsx", COPY, ...args], { timeoutMs: 120_000 });
}

describe("bench:copy", () => {
  it("finds the committed value among the assistant tokens, its last occurrence, and judges by the 2x rule", () => {
    expect(
      committedValue([
        { role: "user", content: "q" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            { id: "c", type: "function", function: { name: "commit_final_answer", arguments: '{"answers":["24"]}' } },
          ],
        },
      ]),
    ).toBe("24");
    // tokens 7 8 appear in the prompt (mask 0) and twice in assistant tokens: the last one counts.
    expect(answerStart([7, 8, 1, 7, 8, 2, 7, 8], [0, 0, 1, 1, 1, 1, 1, 1], [7, 8])).toBe(6);
    expect(answerStart([7, 8, 1], [0, 0, 1], [7, 8])).toBe(-1);
    expect(answerStart([7, 8], [1, 1], [])).toBe(-1);
    expect(verdictOf(COPY_RATIO * 0.2, 0.2)).toBe("copies");
    expect(verdictOf(2.5, 0.2)).toBe("guesses");
    // an untrained model pays ln V on every token: the ratio alone would call that copying
    expect(verdictOf(Math.log(1024), Math.log(1024))).toBe("guesses");
  });

  it("finds the question's words among the assistant tokens, outside the answer value", () => {
    expect(
      questionWords([
        { role: "system", content: "You are a database agent." },
        { role: "user", content: "What is the total stock of 'garden' products? The headers are name, stock." },
      ]),
    ).toEqual(["What", "the", "total", "stock", "garden", "products", "The", "headers", "are", "name"]);
    // numbers of two digits or more, whole: not a digit of a word, not one digit, not a leading zero
    expect(
      questionNumbers([
        { role: "user", content: "Add a book with year 1951, pages 80 and id b52; set 7 to 0457 or 1951." },
      ]),
    ).toEqual(["1951", "80"]);
    // word A = [5, 6] (in context), word B = [9]; prompt tokens (mask 0) and the answer value (8..) do not count
    const tokens = [5, 6, 1, 5, 6, 2, 9, 3, 9];
    const mask = [0, 0, 1, 1, 1, 1, 1, 1, 1];
    const found = questionWordPositions(tokens, mask, [[5, 6], [9], []], (i) => i >= 8);
    expect([...found].sort((a, b) => a - b)).toEqual([3, 4, 6]);
    expect(occursIn([1, 2, 3, 4], [2, 3])).toBe(true);
    expect(occursIn([1, 2, 3, 4], [3, 2])).toBe(false);
    // a partial match is not a word
    expect(questionWordPositions([5, 7], [1, 1], [[5, 6]], () => false).size).toBe(0);
    // one span per spelt word: the unspaced form [6, 7] inside the spaced form [4, 6, 7] is not a word of its own
    expect(
      questionWordSpans(
        [1, 4, 6, 7, 2, 6, 7],
        [0, 1, 1, 1, 1, 1, 1],
        [
          [6, 7],
          [4, 6, 7],
        ],
        () => false,
      ),
    ).toEqual([
      [1, 4],
      [5, 7],
    ]);
  });

  it("sums the clicked ids' loss in all and by position within the id, and prints it per checkpoint", () => {
    const logp = [
      [-9, -0.1, -3, -0.2, -9, -2],
      [-1, -4, -0.5],
    ];
    // trace 0: an id at tokens 1..3 and one at 5; trace 1: one at 0..2
    const loss = identifierLoss(logp, [
      [
        [1, 4],
        [5, 6],
      ],
      [[0, 3]],
    ]);
    expect(loss.tokens).toBe(7);
    expect(loss.loss).toBeCloseTo((0.1 + 3 + 0.2 + 2 + 1 + 4 + 0.5) / 7, 6);
    expect(loss.confidentShare).toBeCloseTo(3 / 7, 6); // 0.1, 0.2, 0.5 are below ln 2
    expect(loss.byPosition).toEqual([
      { tokens: 3, loss: expect.closeTo((0.1 + 2 + 1) / 3, 6) },
      { tokens: 2, loss: expect.closeTo((3 + 4) / 2, 6) },
      { tokens: 2, loss: expect.closeTo((0.2 + 0.5) / 2, 6) },
    ]);
    expect(identifierLoss([], [])).toEqual({ tokens: 0, loss: 0, confidentShare: 0, byPosition: [] });
    const table = identifierTable(
      [
        { folder: "a", version: 3, ids: loss, drills: identifierLoss([[-1, -2, -3]], [[[1, 3]]]) },
        { folder: "b", version: 0, ids: identifierLoss([], []), drills: identifierLoss([], []) },
      ],
      30,
    ).split("\n");
    expect(table[0]).toContain("ln 34 = 3.53");
    expect(table[0]).toContain("ln 62 = 4.13");
    expect(table[2]).toBe("| checkpoint | id tokens | loss | p > 0.5 | token 1 | token 2 | token 3 | drill loss |");
    expect(table[4]).toBe(`| a (v3) | 7 | ${loss.loss.toFixed(3)} | 0.43 | 1.03 | 3.50 | 0.35 | 2.50 |`);
    expect(table[5]).toBe("| b (v0) | 0 | 0.000 | 0.00 | – | – | – | 0.00 |");
  });

  describe("on a tiny checkpoint", () => {
    let base: string;
    beforeAll(async () => {
      base = join(tempDir("agentrl-copy-"), "base");
      await buildTinyBase(base);
    }, 240_000);

    it("prints one table row per checkpoint with each task's columns, and one JSON line with every field", async () => {
      const run = await copyProbe([base, base, "--n", "1", "--episodes", "6", "--json"]);
      expect(run.status, run.stderr).toBe(0);
      const lines = run.stdout.trimEnd().split("\n");
      const table = lines.filter((line) => line.startsWith("|"));
      const head =
        table[0]
          ?.split("|")
          .slice(1, -1)
          .map((cell) => cell.trim()) ?? [];
      expect(head.slice(0, 3)).toEqual(["checkpoint", "model", "params"]);
      for (const task of TASKS) expect(head).toContain(`${task} greedy %`);
      expect(head.slice(-3)).toEqual(["avg greedy %", "verdict", "recipe"]);
      expect(table).toHaveLength(4); // header, rule, two checkpoints
      for (const row of table.slice(2)) {
        const cells = row.split(" | ");
        expect(cells).toHaveLength(head.length);
        expect(row).toContain("d=32 L=1 h=2/1 ffn=64 V=400");
        expect(row).toMatch(/\| (copies|guesses) \| `agentrl sft --out /);
      }
      const json = JSON.parse(lines.at(-1) ?? "") as {
        bench: string;
        n: number;
        episodes: number;
        checkpoints: Array<{
          folder: string;
          version: number;
          model: { dModel: number; parameters: number };
          recipe: string | null;
          greedyAverage: number | null;
          verdict: string;
          tasks: Array<Record<string, unknown>>;
        }>;
      };
      expect(json).toMatchObject({ bench: "copy", n: 1, episodes: 6 });
      expect(json.checkpoints).toHaveLength(2);
      const probe = json.checkpoints[0];
      expect(probe).toMatchObject({ folder: base, version: 0, model: { dModel: 32, parameters: 34_912 } });
      expect(probe?.recipe).toMatch(/^agentrl sft --out /);
      expect(probe?.greedyAverage).toBeGreaterThanOrEqual(0);
      expect(probe?.tasks.map((t) => t.task)).toEqual([...TASKS]);
      for (const task of probe?.tasks ?? []) {
        expect(Object.keys(task).sort()).toEqual(
          [
            "confidentShare",
            "greedySuccess",
            "otherLoss",
            "otherTokens",
            "questionNumberFirstLoss",
            "questionNumberRestLoss",
            "questionNumberTokens",
            "questionWordConfidentShare",
            "questionWordLoss",
            "questionWordTokens",
            "ratio",
            "renamedFirstLoss",
            "renamedRestLoss",
            "renamedSpeltAsAsked",
            "renamedWordConfidentShare",
            "renamedWordLoss",
            "renamedWordTokens",
            "task",
            "testInstances",
            "valueLoss",
            "valueTokens",
            "verdict",
          ].sort(),
        );
        expect(task.testInstances).toBe(1);
        expect(task.valueTokens).toBeGreaterThan(0);
        expect(task.otherTokens).toBeGreaterThan(0);
        // the expert's query or command names words of its question (a table, a column, a path)
        expect(task.questionWordTokens).toBeGreaterThan(0);
        expect(task.questionWordTokens).toBeLessThanOrEqual(task.otherTokens as number);
        // …and renamed to fresh words, the query or command spells the fresh ones.
        expect(task.renamedWordTokens).toBeGreaterThan(0);
        expect(task.renamedWordLoss).toBeGreaterThan(0);
        // every renamed word has a first token; the words of these tasks are longer than one token
        expect(task.renamedFirstLoss).toBeGreaterThan(0);
        expect(task.renamedRestLoss).toBeGreaterThan(0);
        // the variants rename the question and the actions alike: most spellings are the question's own
        expect(task.renamedSpeltAsAsked).toBeGreaterThan(0.5);
        expect(task.renamedSpeltAsAsked).toBeLessThanOrEqual(1);
        expect(task.verdict).toBe(verdictOf(task.valueLoss as number, task.otherLoss as number));
        // a question number an action spells has a first token; none spelt leaves both losses null
        if ((task.questionNumberTokens as number) > 0) expect(task.questionNumberFirstLoss).toBeGreaterThan(0);
        else expect([task.questionNumberFirstLoss, task.questionNumberRestLoss]).toEqual([null, null]);
      }
      // one of db's six seeded episodes spells a number its question gives
      expect(probe?.tasks[0]?.questionNumberTokens).toBeGreaterThan(0);
      // The same seeded episodes for every checkpoint: the same folder twice gives the same losses.
      expect(json.checkpoints[1]?.tasks).toEqual(probe?.tasks);
    }, 180_000);

    it("skips the evaluation with --n 0 (bench:answer-loss)", async () => {
      const run = await copyProbe([base, "--n", "0", "--episodes", "1", "--json", "--ids", "--drills"]);
      expect(run.status, run.stderr).toBe(0);
      type Drill = { drills: number; firstLoss: number; restLoss: number; numberFirstLoss: number | null };
      const json = JSON.parse(run.stdout.trimEnd().split("\n").at(-1) ?? "") as {
        checkpoints: Array<{ greedyAverage: number | null; tasks: Array<{ greedySuccess: number | null }> }>;
        identifiers: Array<{ folder: string; ids: { tokens: number }; drills: { tokens: number } }>;
        drills: Array<{ folder: string; version: number; copy: Drill; recall: Drill; path: Drill }>;
      };
      // --drills: copy, recall and path drills, first token apart from the rest
      expect(run.stdout).toContain(
        "| checkpoint | copy drills first / rest | recall drills first / rest | recall: a number's first token | path drills first / rest |",
      );
      expect(json.drills).toHaveLength(1);
      const drills = json.drills[0];
      expect(drills).toMatchObject({ folder: base, version: 0 });
      for (const kind of [drills?.copy, drills?.recall, drills?.path]) {
        expect(kind?.drills).toBe(64);
        // two training steps leave the tiny model near a guess over its 400 tokens (ln 400 = 5.99)
        expect(kind?.firstLoss).toBeGreaterThan(4);
        expect(kind?.restLoss).toBeGreaterThan(4);
      }
      // about half the recall drills ask a number; the others have none
      expect(drills?.recall.numberFirstLoss).toBeGreaterThan(4);
      expect([drills?.copy.numberFirstLoss, drills?.path.numberFirstLoss]).toEqual([null, null]);
      // --ids: the clicked-id table after the copy table, and its figures in the JSON line
      expect(run.stdout).toContain("| checkpoint | id tokens | loss | p > 0.5 |");
      expect(json.identifiers).toEqual([
        {
          folder: base,
          version: 0,
          ids: expect.objectContaining({ tokens: expect.any(Number) }),
          drills: expect.objectContaining({ loss: expect.any(Number) }),
        },
      ]);
      // every drill's repeat after its first token is scored
      expect(json.identifiers[0]?.drills.tokens).toBeGreaterThan(32 * 6);
      expect(json.checkpoints[0]?.greedyAverage).toBeNull();
      expect(json.checkpoints[0]?.tasks.map((t) => t.greedySuccess)).toEqual([null, null]);
      expect(run.stdout).toMatch(/\| – \| – \| (copies|guesses) \|/);
      // the renamed-word loss, its first token / the rest, then the skipped greedy column
      expect(run.stdout).toMatch(
        /\| \d+\.\d{3} \(\d\.\d{2}\) \| \d+\.\d{2} \/ \d+\.\d{2} \| (– \/ –|\d+\.\d{2} \/ \d+\.\d{2}) \| – \|/,
      );
    }, 120_000);

    it("answers a bad command line with what was wrong and what is allowed, and exits 2", async () => {
      const empty = tempDir("agentrl-copy-empty-");
      mkdirSync(join(empty, "policies"));
      const cases: Array<[string[], RegExp]> = [
        [[], /<checkpoint folder>: give at least one checkpoint folder/],
        [[base, "--n", "ten"], /--n must be a whole number, got "ten"/],
        [[base, "--episodes", "0"], /--episodes: must be at least 1/],
        [[base, "--seed", "3"], /Unknown option '--seed'/],
        [[empty], /holds no checkpoint: a checkpoint folder has policies\/vN\//],
        [[join(empty, "missing")], /missing holds no checkpoint/],
      ];
      for (const [args, message] of cases) {
        const error = await parseCopyArgs(args).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error, args.join(" ")).toBeInstanceOf(CopyArgsError);
        expect((error as Error).message).toMatch(message);
        expect((error as Error).message).toContain("usage: npm run bench:copy --");
      }
      expect(await parseCopyArgs([base])).toEqual({
        folders: [base],
        n: 100,
        episodes: 40,
        json: false,
        ids: false,
        drills: false,
      });
      // The command itself: the message on stderr, nothing on stdout, exit 2.
      const run = await copyProbe([empty]);
      expect(run.status, run.stderr).toBe(2);
      expect(run.stderr).toMatch(/^bench:copy: .* holds no checkpoint/);
      expect(run.stdout).toBe("");
    }, 120_000);
  });
});
