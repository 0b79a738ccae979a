import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { parseDbbench } from "../../env-images/dbbench/instances.ts";
import {
  pyEvalLiteral,
  pyFloatRepr,
  pyParseFloat,
  pyRepr,
  pyStrip,
  pyStrRepr,
} from "../../env-images/dbbench/python.ts";
import {
  cleanAnswer,
  compareResults,
  hashFromPrinted,
  normalizeSpecialValue,
} from "../../env-images/dbbench/scorer.ts";

/**
 * Every rule of AgentBench FC's DBBench scorer (result_processor.py at the pinned commit). The
 * expected values in scorer-cases.json were produced by running upstream's own Python scorer on
 * each case, not written by hand.
 */
const Case = z.object({
  rule: z.string(),
  answer: z.unknown(),
  truth: z.unknown(),
  type: z.string(),
  expected: z.boolean(),
});
const cases = z.array(Case).parse(JSON.parse(readFileSync(new URL("./scorer-cases.json", import.meta.url), "utf8")));

/** JSON tool arguments as the task hands them to the scorer. */
function asAnswer(value: unknown): Parameters<typeof compareResults>[0] {
  if (Array.isArray(value))
    return value.map((v) =>
      typeof v === "number"
        ? Number.isInteger(v)
          ? { kind: "int" as const, text: String(v) }
          : { kind: "float" as const, value: v }
        : (v as string | boolean | null),
    );
  return value as string | null;
}

describe("DBBench scorer, rule for rule as upstream", () => {
  it.each(cases)("$rule", ({ answer, truth, type, expected }) => {
    expect(compareResults(asAnswer(answer), asAnswer(truth), type)).toBe(expected);
  });

  it("normalizes special values in upstream's order", () => {
    expect(normalizeSpecialValue(null)).toBe("0");
    expect(normalizeSpecialValue(" 12% ")).toBe("12");
    expect(normalizeSpecialValue("1,234,567")).toBe("1234567");
    expect(normalizeSpecialValue("[1,2]")).toBe("[1,2]");
    expect(normalizeSpecialValue("-Infinity")).toBe("0");
    expect(normalizeSpecialValue("Undefined")).toBe("0");
  });

  it("cleans connector rows, lists and plain strings", () => {
    expect(cleanAnswer("[('a',), ('b',)]")).toEqual(["a", "b"]);
    expect(cleanAnswer("[(None,)]")).toEqual(["0"]);
    expect(cleanAnswer("[]")).toEqual([]);
    expect(cleanAnswer(" 'x' ")).toEqual(["x"]);
    expect(cleanAnswer(null)).toEqual(["0"]);
  });

  it("extracts the hash as upstream does from the printed result", () => {
    expect(hashFromPrinted("[('03b2eddd4fe471e0f29fc9e907fd5a5d',)]")).toBe("03b2eddd4fe471e0f29fc9e907fd5a5d");
    expect(hashFromPrinted("[(None,)]")).toBe("None");
  });
});

describe("Python semantics the scorer and observations rest on", () => {
  it("prints floats as repr() does", () => {
    const cases: Array<[number, string]> = [
      [293, "293.0"],
      [0.1, "0.1"],
      [1e16, "1e+16"],
      [1234567890123456, "1234567890123456.0"],
      [0.0001, "0.0001"],
      [0.00001, "1e-05"],
      [-2.5, "-2.5"],
      [1.5e-7, "1.5e-07"],
      [-0, "-0.0"],
      [Number.NaN, "nan"],
      [Number.POSITIVE_INFINITY, "inf"],
      [123456789.125, "123456789.125"],
      [2 ** 70, "1.1805916207174113e+21"],
    ];
    for (const [value, text] of cases) expect(pyFloatRepr(value), String(value)).toBe(text);
  });

  it("quotes strings as repr() does", () => {
    expect(pyStrRepr("abc")).toBe("'abc'");
    expect(pyStrRepr("it's")).toBe(`"it's"`);
    expect(pyStrRepr(`it's "x"`)).toBe(`'it\\'s "x"'`);
    expect(pyStrRepr("a\\b\n\t")).toBe("'a\\\\b\\n\\t'");
    expect(pyStrRepr("Ole Mørk")).toBe("'Ole Mørk'");
    expect(pyStrRepr("\u0000\u007f\u00a0\u200b")).toBe("'\\x00\\x7f\\xa0\\u200b'");
    expect(pyStrRepr("😀")).toBe("'😀'");
  });

  it("parses float() and literals as Python does, and refuses what Python refuses", () => {
    expect(pyParseFloat(" 1_000.5 ")).toBe(1000.5);
    expect(pyParseFloat("1e3")).toBe(1000);
    expect(pyParseFloat(".5")).toBe(0.5);
    expect(pyParseFloat("5.")).toBe(5);
    expect(pyParseFloat("-Infinity")).toBe(Number.NEGATIVE_INFINITY);
    for (const bad of ["1,000", "1__0", "_1", "0x10", "", "1e", "abc"]) expect(pyParseFloat(bad), bad).toBeUndefined();
    expect(pyRepr(pyEvalLiteral("[('a', 1, 2.0, None, True), (3,)]")!)).toBe("[('a', 1, 2.0, None, True), (3,)]");
    expect(pyEvalLiteral("(1)")).toEqual({ kind: "int", text: "1" });
    expect(pyEvalLiteral("[a]")).toBeUndefined();
    expect(pyEvalLiteral("[Decimal('1')]")).toBeUndefined();
    expect(pyStrip("''x''", "'")).toBe("x");
  });

  it("reads JSON numbers as Python's json module does, so str(cell) keeps 82562.0", () => {
    const line = JSON.stringify({
      description: "q",
      type: ["other"],
      label: ["1"],
      table: { table_name: "t", table_info: { columns: [{ name: "a", type: "TEXT" }], rows: [[0]] } },
    }).replace("[[0]]", "[[82562.0, 7, 1e3, null, true]]");
    const [instance] = parseDbbench(line, "inline");
    expect(instance?.tables[0]?.rows[0]).toEqual(["82562.0", "7", "1000.0", "None", "True"]);
  });

  it("names the line and field of a malformed instance", () => {
    expect(() => parseDbbench('{"description": 1}', "bad.jsonl")).toThrow(/bad\.jsonl line 1: .*description/);
    expect(() => parseDbbench("{not json", "bad.jsonl")).toThrow(/bad\.jsonl line 1: not JSON/);
  });
});
