import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import { syllablesOf } from "../../trainer-image/sft/answer-variants.ts";
import { frameWordsOf, questionVariant, questionWordsInActions } from "../../trainer-image/sft/question-variants.ts";
import { messagesText } from "../support/messages.ts";

const call = (name: string, args: string) => ({
  id: "call_0",
  type: "function" as const,
  function: { name, arguments: args },
});

/** A db-like episode: the question names a column and a category the query spells again. */
function episode(column: string, category: string): ChatMessage[] {
  return [
    { role: "system", content: `Run SQL on the table; the stock column is numeric.` },
    {
      role: "user",
      content: `What is the total ${column} of the products with category '${category}'?\nThe name of this table is products, and the headers are name, category, price, stock.`,
    },
    {
      role: "assistant",
      content: `I will sum ${column}.`,
      tool_calls: [
        call(
          "execute_sql",
          JSON.stringify({ query: `SELECT SUM(${column}) FROM products WHERE category = '${category}'` }),
        ),
      ],
    },
    { role: "tool", tool_call_id: "call_0", content: `SUM(${column})\n290\n(1 row)` },
    { role: "assistant", content: null, tool_calls: [call("commit_final_answer", '{"answers":["290"]}')] },
  ];
}

describe("question-renamed variants", () => {
  const frame = frameWordsOf([
    "The name of this table is products, and the headers are name, stock.",
    "The name of this table is cities, and the headers are name, area.",
    "How many cities? The name of this table is cities.",
  ]);
  const syllables = syllablesOf(["stock", "category", "tools", "products", "garden", "population"]);

  it("takes a task's frame words from at least half of its questions", () => {
    expect([...frame].sort()).toEqual(["The", "and", "are", "cities", "headers", "name", "table", "the", "this"]);
  });

  it("finds the question's words the actions spell, minus the frame, in question order", () => {
    // `name` and `The` are frame words; `total`, `with` and `headers` are not in an action; `SUM` is
    // in the query but not in the question.
    expect(questionWordsInActions(episode("stock", "tools"), frame)).toEqual([
      "stock",
      "products",
      "category",
      "tools",
    ]);
    // Words of the assistant's prose do not count: only tool-call arguments are actions.
    const prose = episode("stock", "tools").map((m) => (m.role === "assistant" ? { ...m, tool_calls: [] } : m));
    expect(questionWordsInActions(prose, frame)).toEqual([]);
  });

  it("renames each such word everywhere but the system prompt, consistently, and nothing else", () => {
    const original = episode("stock", "tools");
    const variant = questionVariant(original, frame, syllables, seededRandom(7));
    if (!variant) throw new Error("expected a variant");
    const user = variant[1]?.content ?? "";
    const column = /total (\w+) of/.exec(user)?.[1] ?? "";
    const [, table = "", categoryColumn = "", category = ""] = /the (\w+) with (\w+) '(\w+)'/.exec(user) ?? [];
    for (const [fresh, old] of [
      [column, "stock"],
      [table, "products"],
      [categoryColumn, "category"],
      [category, "tools"],
    ] as const) {
      expect(fresh).toMatch(/^[a-z]+$/);
      expect(fresh).not.toBe(old);
    }
    expect(variant).toEqual(
      original.map((m, i) => {
        if (i === 0) return m; // the system prompt keeps `stock`
        const rename = (s: string) =>
          s
            .replace(/\bstock\b/g, column)
            .replace(/\bproducts\b/g, table)
            .replace(/\btools\b/g, category)
            .replace(/\bcategory\b/g, categoryColumn);
        if (m.role === "assistant")
          return {
            ...m,
            content: m.content === null ? null : rename(m.content),
            tool_calls: m.tool_calls?.map((c) => ({
              ...c,
              function: { ...c.function, arguments: rename(c.function.arguments) },
            })),
          };
        return { ...m, content: rename(m.content) };
      }),
    );
    expect(messagesText(variant.slice(1))).not.toMatch(/\b(stock|products|tools|category)\b/);
    // Frame words, SQL keywords and the answer stay.
    expect(messagesText(variant)).toContain("The name of this table is");
    expect(messagesText(variant)).toContain("SELECT SUM(");
    expect(messagesText(variant)).toContain('{"answers":["290"]}');
  });

  it("never renames to a word the trace already has, in any case, and gives different words different names", () => {
    // From these pieces a two-syllable word is `where` (the query's WHERE) a quarter of the time.
    const risky = syllablesOf(["whe", "re"]);
    const renamedColumns: string[] = [];
    for (let seed = 0; seed < 40; seed++) {
      const variant = questionVariant(episode("price", "toys"), frame, risky, seededRandom(seed));
      const user = variant?.[1]?.content ?? "";
      const column = /total (\w+) of/.exec(user)?.[1] ?? "";
      const [, table = "", categoryColumn = ""] = /the (\w+) with (\w+) '/.exec(user) ?? [];
      renamedColumns.push(column);
      expect(column.toLowerCase()).not.toBe("where");
      expect(new Set([column, table, categoryColumn]).size).toBe(3);
    }
    // Renamed every time, to the other words these pieces make.
    expect(renamedColumns.every((c) => ["rewhe", "whewhe", "rere"].includes(c))).toBe(true);
    expect(new Set(renamedColumns).size).toBe(3);
  });

  it("with numbers, also redraws the question's values of two or more digits that the actions spell", () => {
    const update: ChatMessage[] = [
      { role: "system", content: "Run SQL." },
      { role: "user", content: "Set the stock of the product named 'Hammer' to 369, in 7 rows at most." },
      {
        role: "assistant",
        content: null,
        tool_calls: [
          call(
            "execute_sql",
            JSON.stringify({ query: "UPDATE products SET stock = 369 WHERE name = 'Hammer' LIMIT 7" }),
          ),
        ],
      },
      { role: "tool", tool_call_id: "call_0", content: "stock 369 set (1 row)" },
    ];
    expect(questionWordsInActions(update, frame)).toEqual(["stock", "Hammer"]);
    expect(questionWordsInActions(update, frame, { numbers: true })).toEqual(["stock", "Hammer", "369"]);
    const values = new Set<string>();
    for (let seed = 0; seed < 20; seed++) {
      const variant = questionVariant(update, frame, syllables, seededRandom(seed), { numbers: true });
      const user = variant?.[1]?.content ?? "";
      const value = /to (\d+), in 7 rows/.exec(user)?.[1] ?? "";
      expect(value).toMatch(/^[1-9]\d\d$/);
      expect(value).not.toBe("369");
      values.add(value);
      // the same value in the action and the observation; the one-digit 7 stays
      expect(messagesText(variant ?? [])).toContain(`= ${value} WHERE`);
      expect(variant?.[3]?.content).toMatch(new RegExp(`^\\w+ ${value} set`));
      expect(messagesText(variant ?? [])).toContain("LIMIT 7");
      // without `numbers` the value stays
      const wordsOnly = questionVariant(update, frame, syllables, seededRandom(seed));
      expect(wordsOnly?.[1]?.content).toContain("to 369, in 7 rows");
    }
    expect(values.size).toBeGreaterThan(15);
  });

  it("is reproducible from its random source, and absent when there is nothing to rename", () => {
    const a = questionVariant(episode("price", "toys"), frame, syllables, seededRandom(3));
    const b = questionVariant(episode("price", "toys"), frame, syllables, seededRandom(3));
    const c = questionVariant(episode("price", "toys"), frame, syllables, seededRandom(4));
    expect(a).toEqual(b);
    expect(a).not.toEqual(c);
    const noActions: ChatMessage[] = [
      { role: "user", content: "What is 2 + 3?" },
      { role: "assistant", content: null, tool_calls: [call("answer", '{"value":5}')] },
    ];
    expect(questionVariant(noActions, frame, syllables, seededRandom(1))).toBeUndefined();
    expect(questionVariant(episode("stock", "tools"), frame, { syllables: [], codas: [] }, seededRandom(1))).toBe(
      undefined,
    );
  });
});
