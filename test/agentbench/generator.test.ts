import { describe, expect, it } from "vitest";
import { generateSynthInstance, STD_TYPE_COUNTS, SYNTH_SPLITS } from "../../env-images/dbbench/generator.ts";

/** dbbench-synth draws DBBench's question types in dbbench-std's proportions and its table sizes. */
describe("dbbench-synth's generator", () => {
  const instances = Array.from({ length: 3000 }, (_, i) => generateSynthInstance(i));

  it("is deterministic by index", () => {
    expect(generateSynthInstance(42)).toEqual(generateSynthInstance(42));
    expect(generateSynthInstance(42)).not.toEqual(generateSynthInstance(43));
  });

  it("draws question types in dbbench-std's proportions (within 1.5 points over 3000)", () => {
    const counts: Record<string, number> = {};
    for (const instance of instances) counts[instance.type] = (counts[instance.type] ?? 0) + 1;
    expect(Object.keys(counts).sort()).toEqual(Object.keys(STD_TYPE_COUNTS).sort());
    for (const [type, stdCount] of Object.entries(STD_TYPE_COUNTS))
      expect(Math.abs(counts[type]! / 3000 - stdCount / 300), type).toBeLessThan(0.015);
  });

  it("makes tables of 7 to 105 rows with DBBench's kind of names, unique keys, in MySQL's dialect", () => {
    const rows = instances.map((i) => i.tables[0]!.rows.length).sort((a, b) => a - b);
    expect(rows[0]).toBe(7);
    expect(rows.at(-1)).toBeLessThanOrEqual(105);
    expect(rows[1500]).toBeGreaterThanOrEqual(18);
    expect(rows[1500]).toBeLessThanOrEqual(26);
    for (const instance of instances.slice(0, 300)) {
      const [table] = instance.tables;
      expect(new Set(table!.rows.map((r) => r[0])).size, `${instance.index}`).toBe(table!.rows.length);
      expect(instance.addDescription).toBe(
        `The name of this table is ${table!.name}, and the headers of this table are ${table!.columns.join(",")}.`,
      );
      expect(instance.referenceSql).toContain(`\`${table!.name}\``);
      expect(instance.referenceSql).not.toMatch(/"/);
    }
  });

  it("keeps train and test indices apart", () => {
    expect(SYNTH_SPLITS.train.end).toBeLessThanOrEqual(SYNTH_SPLITS.test.start);
  });
});
