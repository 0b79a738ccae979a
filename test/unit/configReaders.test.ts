import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { CONFIG_READERS } from "../../shared/config/readers.ts";
import { configFields } from "../../shared/config/reference.ts";

/** The field's own name: the last segment of its path. */
function leafName(path: string): string {
  return path
    .split(/[.[\]]+/)
    .filter(Boolean)
    .at(-1) as string;
}

describe("every config field has a reader", () => {
  const fields = configFields().map((f) => f.path);

  it("CONFIG_READERS names exactly the schema's leaf fields (a new field needs a reader to land)", () => {
    expect(Object.keys(CONFIG_READERS).sort()).toEqual([...fields].sort());
  });

  it.each(Object.entries(CONFIG_READERS))("%s is read where the map says", (path, files) => {
    expect(files.length).toBeGreaterThan(0);
    const name = leafName(path);
    for (const file of files) {
      expect(existsSync(file), `${file} (reader of ${path}) does not exist`).toBe(true);
      expect(file.startsWith("shared/config/"), `${file}: the schema is not a reader`).toBe(false);
      const source = readFileSync(file, "utf8");
      // a property access or a destructured key, not a word in a comment
      const read = new RegExp(`(\\.${name}\\b|\\{[^}]*\\b${name}\\b[^}]*\\}\\s*[=:])`);
      expect(read.test(source), `${file} does not read ${path}`).toBe(true);
    }
  });
});
