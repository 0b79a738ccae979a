import { describe, expect, it } from "vitest";
import type { ChatMessage } from "../../shared/protocol/openai.ts";
import { seededRandom } from "../../shared/rl/random.ts";
import {
  answerVariant,
  copiedAnswers,
  recombineValue,
  resampleValue,
  syllablesOf,
} from "../../trainer-image/sft/answer-variants.ts";

const call = (name: string, args: string) => ({
  id: "c1",
  type: "function" as const,
  function: { name, arguments: args },
});

/** A db-like episode: query, result table, answer copied from the table, closing observation. */
function episode(result: string, answerArgs: string): ChatMessage[] {
  return [
    { role: "system", content: "You answer with SQL. Use 4 when unsure." },
    { role: "user", content: "How many books have 4 stars?" },
    { role: "assistant", content: null, tool_calls: [call("execute_sql", '{"sql": "SELECT COUNT(*) FROM t"}')] },
    { role: "tool", tool_call_id: "c1", content: result },
    { role: "assistant", content: "The result above is the answer.", tool_calls: [call("commit", answerArgs)] },
    { role: "tool", tool_call_id: "c1", content: "Your answer has been committed." },
  ];
}

/** The observation the answer copies from, and the answer's arguments, of a variant. */
function rewritten(variant: ChatMessage[] | undefined): { observation: string; args: string } {
  const observation = variant?.[3];
  const answer = variant?.[4];
  if (observation?.role !== "tool" || answer?.role !== "assistant") throw new Error("not an episode variant");
  return { observation: observation.content, args: answer.tool_calls?.[0]?.function.arguments ?? "" };
}

describe("answer-resampled variants", () => {
  it("finds answer values that stand on a line of the observation before the answer", () => {
    expect(copiedAnswers(episode("COUNT(*)\n108\n(1 row)", '{"answers":["108"]}'))).toEqual(["108"]);
    expect(copiedAnswers(episode("name\nKebaku\n  Rara \n(2 rows)", '{"answers":["Kebaku","Rara"]}'))).toEqual([
      "Kebaku",
      "Rara",
    ]);
    // Inside a longer line, not on its own: not a copy this module can rewrite.
    expect(copiedAnswers(episode("the count is 108", '{"answers":["108"]}'))).toEqual([]);
    // Not a string argument (an empty list, a finish with a thought that the output lacks).
    expect(copiedAnswers(episode("done", '{"answers":[]}'))).toEqual([]);
    expect(copiedAnswers(episode("done", '{"thought":"The requested change is done."}'))).toEqual([]);
    expect(copiedAnswers(episode("108", "not json"))).toEqual([]);
    // An integer argument (the example task answers {"value": 164}).
    expect(copiedAnswers(episode("164", '{"value":164}'))).toEqual(["164"]);
  });

  it("draws same-length integers, and other answers of the task for words", () => {
    const random = seededRandom(1);
    for (let i = 0; i < 50; i++) {
      const fresh = resampleValue("4497", [], random);
      expect(fresh).toMatch(/^[1-9]\d{3}$/);
      expect(resampleValue("7", [], random)).toMatch(/^\d$/);
    }
    expect(resampleValue("Kebaku", ["Kebaku", "Rara"], random)).toBe("Rara");
    expect(resampleValue("Kebaku", ["Kebaku"], random)).toBeUndefined();
  });

  it("recombines words from the task's syllables: new as a whole, made of the same pieces, case kept", () => {
    const pieces = syllablesOf(["Zicanar", "Kebaku", "New York"]);
    expect(pieces.syllables).toEqual(["zi", "ca", "na", "ke", "ba", "ku", "ne", "yo"]);
    expect(pieces.codas).toEqual(["r", "w", "rk"]);
    const random = seededRandom(4);
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const fresh = recombineValue("Zicanar", pieces, random) as string;
      // three syllables and a final consonant run, capitalized as the original
      expect(fresh).toMatch(/^(Zi|Ca|Na|Ke|Ba|Ku|Ne|Yo)(zi|ca|na|ke|ba|ku|ne|yo){2}(r|w|rk)$/);
      seen.add(fresh);
    }
    expect(seen.size).toBeGreaterThan(100); // not a pool of memorizable words
    expect(recombineValue("USA 42", pieces, random)).toMatch(/^[A-Z]+ [1-9]\d$/);
    expect(recombineValue("x-ray_7", pieces, random)).toMatch(/^[a-z]+-[a-z]+_\d$/);
    expect(recombineValue("Kebaku", { syllables: [], codas: [] }, random)).toBeUndefined();
  });

  it("with syllables, a variant's word answer is recombined in the observation and the answer alike", () => {
    const messages = episode("name\nKebaku\n(1 row)", '{"answers":["Kebaku"]}');
    const variant = answerVariant(messages, ["Kebaku", "Rara"], seededRandom(2), syllablesOf(["Kebaku", "Rara"]));
    const { observation, args } = rewritten(variant);
    const fresh = observation.split("\n")[1] as string;
    expect(fresh).toMatch(/^[A-Z][a-z]+$/);
    expect(["Kebaku", "Rara"]).not.toContain(fresh);
    expect(args).toBe(`{"answers":["${fresh}"]}`);
  });

  it("rewrites the value in the observation and in the answer, and nothing else", () => {
    const original = episode("COUNT(*)\n4\n(1 row)", '{"answers": ["4"]}');
    const random = seededRandom(7);
    const variants = Array.from({ length: 20 }, () => answerVariant(original, [], random));
    const changed = variants.filter((v) => v !== undefined);
    // A one-digit value can be redrawn as itself; then there is no variant.
    expect(changed.length).toBeGreaterThan(10);
    for (const variant of changed) {
      const { observation, args } = rewritten(variant);
      const [, value] = /^COUNT\(\*\)\n(\d)\n\(1 row\)$/.exec(observation) ?? [];
      expect(value).toBeDefined();
      expect(value).not.toBe("4");
      // The expert's own formatting (the space after the colon) is kept.
      expect(args).toBe(`{"answers": ["${value}"]}`);
      // The question, the system prompt (which mention 4) and the closing observation are untouched.
      expect(variant.filter((_, i) => i !== 3 && i !== 4)).toEqual(original.filter((_, i) => i !== 3 && i !== 4));
    }
    expect(answerVariant(episode("done", '{"answers":[]}'), [], random)).toBeUndefined();
  });

  it("rewrites an integer argument in place, and no other number in the arguments", () => {
    const { observation: fresh, args } = rewritten(
      answerVariant(episode("164", '{"value":164,"steps":[164.5,"164"]}'), [], seededRandom(2)),
    );
    expect(fresh).toMatch(/^[1-9]\d\d$/);
    expect(fresh).not.toBe("164");
    expect(args).toBe(`{"value":${fresh},"steps":[164.5,"${fresh}"]}`);
  });

  it("maps each distinct value once, keeping indentation and the other rows", () => {
    const original = episode("name\n  Kebaku\nRara\nKebaku\n(3 rows)", '{"answers":["Kebaku","Rara","Kebaku"]}');
    const { observation, args: argsJson } = rewritten(
      answerVariant(original, ["Kebaku", "Rara", "Gebe", "Susu"], seededRandom(3)),
    );
    const lines = observation.split("\n");
    expect(lines[0]).toBe("name");
    expect(lines[4]).toBe("(3 rows)");
    expect(lines[1]?.startsWith("  ")).toBe(true);
    expect(lines[1]?.trim()).toBe(lines[3]);
    const args = JSON.parse(argsJson) as { answers: string[] };
    expect(args.answers).toEqual([lines[1]?.trim(), lines[2], lines[3]]);
    // Each value is redrawn (another task answer may take a freed name: Rara can become Kebaku).
    expect(args.answers.map((a, i) => a !== ["Kebaku", "Rara", "Kebaku"][i])).toEqual([true, true, true]);
  });
});
