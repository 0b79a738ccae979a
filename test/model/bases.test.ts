import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { ChatCodec } from "../../shared/chat/index.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { initBackend } from "../../shared/model/index.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";

/** Every checkpoint committed under trainer-image/ (a folder with policies/). */
const BASES = readdirSync("trainer-image").filter((name) => existsSync(join("trainer-image", name, "policies")));
/** The learning bases, whose sft/ holds every stage's record (stage1.json, stage2.json, …, v0.json for the last). */
const STAGED = ["copy-base", "shop-base", "lookup-base", "recall-base"];

function stageRecipes(base: string): string[] {
  const folder = join("trainer-image", base, "sft");
  const stages = readdirSync(folder)
    .filter((f) => /^stage\d+\.json$/.test(f))
    .sort((a, b) => Number(a.match(/\d+/)?.[0]) - Number(b.match(/\d+/)?.[0]));
  return [...stages, "v0.json"].map((f) => {
    const record = JSON.parse(readFileSync(join(folder, f), "utf8")) as { recipe: string };
    return record.recipe;
  });
}

const flag = (recipe: string, name: string) => recipe.match(new RegExp(`--${name} (\\S+)`))?.[1];

describe("committed base checkpoints", () => {
  beforeAll(async () => {
    await initBackend("wasm");
  });

  it("are the learning bases and the default policy", () => {
    expect(BASES).toEqual(expect.arrayContaining([...STAGED, "base-policy"]));
  });

  it.each(BASES)("%s loads and scores a conversation", async (base) => {
    const { policy, tokenizerJson, config } = await loadCheckpoint(
      new LocalObjectStore(join("trainer-image", base)),
      "newest",
    );
    try {
      const codec = ChatCodec.fromTokenizerJson(JSON.parse(tokenizerJson));
      const { tokens } = codec.encodeConversation(
        [
          { role: "user", content: "How many rows has the table?" },
          { role: "assistant", content: "I will count them." },
        ],
        [],
      );
      expect(Math.max(...tokens)).toBeLessThan(config.vocabSize);
      const logp = policy.logProbs([Int32Array.from(tokens)], 1)[0] as Float32Array;
      expect(logp.length).toBe(tokens.length);
      expect([...logp.slice(1)].every((x) => Number.isFinite(x) && x <= 0)).toBe(true);
      expect(existsSync(join("trainer-image", base, "README.md"))).toBe(true);
    } finally {
      policy.dispose();
    }
  });

  it.each(STAGED)("%s: each stage starts from the one before, and its README gives the stages' seeds", (base) => {
    const recipes = stageRecipes(base);
    expect(recipes.length).toBeGreaterThan(1);
    expect(flag(recipes[0] as string, "init")).toBeUndefined();
    for (let k = 1; k < recipes.length; k++)
      expect(flag(recipes[k] as string, "init")).toBe(flag(recipes[k - 1] as string, "out"));
    const readme = readFileSync(join("trainer-image", base, "README.md"), "utf8");
    const readmeSeeds = [...readme.matchAll(/--seed (\d+)/g)].map((m) => m[1]);
    expect(readmeSeeds.slice(0, recipes.length)).toEqual(recipes.map((r) => flag(r, "seed")));
  });
});
