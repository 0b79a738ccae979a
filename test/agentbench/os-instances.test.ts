import { describe, expect, it } from "vitest";
import { loadOs, OS_SIZES, parseOsFile, problemFiles } from "../../env-images/osbench/instances.ts";
import { createOsTask, needsNetwork } from "../../env-images/osbench/task.ts";
import { runnableIndices } from "../../shared/env/session.ts";
import { agentBenchDataDir, requireOrSkip } from "./support.ts";

/** The published OS interaction instances, read as upstream's loader reads them. */
const ready = requireOrSkip("os-instances.test.ts", "AgentBench OS interaction instances", [
  ...(agentBenchDataDir() ? [] : ["no AgentBench data (run `agentrl data fetch agentbench`)"]),
]);

describe.skipIf(!ready)("AgentBench OS instances", () => {
  it.each(Object.entries(OS_SIZES))("%s has %i instances, indexed 0.. in order", (split, size) => {
    const instances = loadOs(split as keyof typeof OS_SIZES);
    expect(instances).toHaveLength(size);
    expect(instances.map((i) => i.index)).toEqual([...Array(size).keys()]);
  });

  it("os-std reads data/1..7 in config order, data/4's files in code-point order, instances in file order", () => {
    const files = problemFiles("os-std").map((f) => f.file.replace("os_interaction/data/", ""));
    expect(files).toEqual([
      "1/stock.json",
      "2/environment.json",
      "3/ac.json",
      ...["N11", "N225", "N37", "N4", "N41", "Q09", "Q19", "Q30", "Q47", "Q49"].map((n) => `4/${n}.json`),
      "5/new.json",
      "6/new.json",
      "7/bootstrap.json",
    ]);
    const perFolder = new Map<string, number>();
    for (const instance of loadOs("os-std")) {
      const folder = instance.file.split("/")[2]!;
      perFolder.set(folder, (perFolder.get(folder) ?? 0) + 1);
    }
    expect(Object.fromEntries(perFolder)).toEqual({ 1: 7, 2: 5, 3: 6, 4: 19, 5: 10, 6: 9, 7: 88 });
    const std = loadOs("os-std");
    // Within a file, the instance's place is its order; across files the index keeps counting.
    for (const [i, instance] of std.entries())
      if (i > 0 && std[i - 1]!.file === instance.file) expect(instance.indexInFile).toBe(std[i - 1]!.indexInFile + 1);
    expect(std[0]!.description).toMatch(/stock\.log/);
    expect(std[143]!.file).toBe("os_interaction/data/7/bootstrap.json");
  });

  it("resolves every script form: string, {file}, {code}, lists, null check entries, create as a list", () => {
    const all = [...loadOs("os-std"), ...loadOs("os-dev"), ...loadOs("os-env_train")];
    for (const instance of all) {
      for (const script of [...instance.init, ...(instance.start ? [instance.start] : [])])
        expect(script.code.length).toBeGreaterThan(0);
      if (instance.evaluation.kind === "check") {
        expect(instance.evaluation.checks.length).toBeGreaterThan(0);
        // A null check runs the example, so every instance with one has an example.
        if (instance.evaluation.checks.includes(null)) expect(instance.evaluation.example).toBeDefined();
      }
    }
    const kinds = new Set(all.map((i) => i.evaluation.kind));
    expect(kinds).toEqual(new Set(["match", "check"]));
    expect(new Set(all.map((i) => i.image))).toEqual(new Set(["default", "packages"]));
    expect(loadOs("os-std").filter((i) => i.start !== undefined)).toHaveLength(4);
    expect(loadOs("os-env_train").every((i) => i.init.length === 1 && i.init[0]!.language === "bash")).toBe(true);
  });

  it("exactly the instances that install packages (init or example) are marked as needing a network", () => {
    expect(
      loadOs("os-std")
        .filter(needsNetwork)
        .map((i) => i.index),
    ).toEqual([52, 53, 55]);
    expect(loadOs("os-dev").filter(needsNetwork)).toEqual([]);
    expect(loadOs("os-env_train").filter(needsNetwork)).toEqual([]);
  });

  it("offline, env check skips those instances and counts them with the reason; with a network it runs them", () => {
    const indices = [50, 51, 52, 53, 54, 55, 56];
    const offline = runnableIndices(createOsTask("os-std", { network: false }), indices);
    expect(offline.indices).toEqual([50, 51, 54, 56]);
    expect([...offline.skipped.entries()]).toEqual([
      [expect.stringMatching(/needs a network: set AGENTRL_OS_NETWORK=1/), [52, 53, 55]],
    ]);
    const online = runnableIndices(createOsTask("os-std", { network: true }), indices);
    expect(online).toEqual({ indices, skipped: new Map() });
  });

  it("a file-named script is read from the split's script folder", () => {
    const first = loadOs("os-std")[0]!;
    expect(first.init[0]!.code).toContain("stock.log");
    if (first.evaluation.kind !== "check") throw new Error("std 0 is a check instance");
    expect(first.evaluation.checks[0]).toBeNull();
    expect(first.evaluation.checks[1]!.language).toBe("python");
  });
});

describe("parseOsFile", () => {
  it("names the failing instance and field path", () => {
    const text = JSON.stringify([
      { description: "ok", evaluation: { match: "1" } },
      { description: "x", evaluation: {} },
    ]);
    expect(() => parseOsFile(text, "t.json", "scripts")).toThrow(/t\.json instance 1: evaluation/);
  });

  it("a single object is one instance; match strings are stripped; create as a list means no init", () => {
    const one = parseOsFile(
      JSON.stringify({ description: "d", create: [null, { file: "x" }], evaluation: { match: " 7 " } }),
      "t.json",
      "s",
    );
    expect(one).toHaveLength(1);
    expect(one[0]!.init).toEqual([]);
    expect(one[0]!.image).toBe("default");
    expect(one[0]!.evaluation).toEqual({ kind: "match", answer: " 7 ", strip: true });
  });

  it("code, bare strings and languages", () => {
    const [instance] = parseOsFile(
      JSON.stringify({
        description: "d",
        create: { local: "packages", init: ["echo a", { code: "print(1)", language: "python" }] },
        start: "sleep 100 &",
        evaluation: { check: [null, "exit 0"], example: { code: "echo 3" } },
      }),
      "t.json",
      "s",
    );
    expect(instance!.image).toBe("packages");
    expect(instance!.init).toEqual([
      { language: "bash", code: "echo a" },
      { language: "python", code: "print(1)" },
    ]);
    expect(instance!.start).toEqual({ language: "bash", code: "sleep 100 &" });
    expect(instance!.evaluation).toEqual({
      kind: "check",
      checks: [null, { language: "bash", code: "exit 0" }],
      example: { language: "bash", code: "echo 3" },
    });
  });
});
