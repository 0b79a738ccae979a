import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { applyOverride, envOverrides, loadConfig, parseConfig } from "../../shared/config/index.ts";
import { configFields, configReferenceMarkdown } from "../../shared/config/reference.ts";
import { ValidationError } from "../../shared/errors.ts";
import { agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";

function issuesOf(fn: () => unknown): Array<{ path: string; message: string }> {
  try {
    fn();
  } catch (error) {
    if (error instanceof ValidationError) return [...error.issues];
    throw error;
  }
  throw new Error("expected a ValidationError");
}

describe("experiment config", () => {
  it("fills every default from an empty object", () => {
    const config = parseConfig({});
    expect(config.experimentId).toBe("default");
    expect(config.transport.kind).toBe("local");
    expect(config.rollout.groupSize).toBe(8);
    expect(config.rollout.crossPolicy.staleProbability).toBe(0.25);
    expect(config.trainer.clipLow).toBe(0.2);
    expect(config.trainer.dualClip).toBe(3);
    expect(config.trainer.klCoef).toBe(1e-4);
    expect(config.tasks.mix.map((t) => t.name)).toEqual(["alfworld", "db", "kg", "os", "webshop"]);
    expect(config.policy.model.dModel % config.policy.model.heads).toBe(0);
  });

  it("rejects unknown keys at their own path", () => {
    const issues = issuesOf(() => parseConfig({ trainer: { learningRate: 1e-3, lerningRate: 1 } }));
    expect(issues).toEqual([{ path: "trainer.lerningRate", message: "unknown field (not allowed here)" }]);
  });

  it("names the failing field and the allowed range", () => {
    const issues = issuesOf(() => parseConfig({ rollout: { groupSize: 1 } }));
    expect(issues[0]?.path).toBe("rollout.groupSize");
    expect(issues[0]?.message).toMatch(/>=2/);
  });

  it("rejects invalid combinations", () => {
    const paths = issuesOf(() =>
      parseConfig({
        rollout: {
          crossPolicy: { staleProbability: 0.8, external: [{ url: "http://x:1/v1", model: "m", probability: 0.5 }] },
        },
        policy: { model: { dModel: 130, heads: 4 } },
        evaluation: { samples: 8 },
      }),
    ).map((i) => i.path);
    expect(paths).toContain("rollout.crossPolicy");
    expect(paths).toContain("policy.model.dModel");
    // Several greedy samples of one instance repeat each other.
    expect(paths).toContain("evaluation.samples");
    expect(parseConfig({ evaluation: { samples: 8, temperature: 1 } }).evaluation).toEqual({
      instances: 20,
      samples: 8,
      temperature: 1,
      topP: 1,
    });
    // Greedy decoding has no nucleus to cut.
    expect(issuesOf(() => parseConfig({ evaluation: { topP: 0.9 } })).map((i) => i.path)).toEqual(["evaluation.topP"]);
  });

  it("dataParallel above 1 needs sync mode (async generation needs the other core)", () => {
    const issues = issuesOf(() => parseConfig({ trainer: { dataParallel: 2 } }));
    expect(issues).toHaveLength(1);
    expect(issues[0]?.path).toBe("trainer.dataParallel");
    expect(issues[0]?.message).toMatch(/needs trainer\.mode "sync" \(mode is "async"\).*generation/);
    expect(parseConfig({ trainer: { dataParallel: 2, mode: "sync" } }).trainer.dataParallel).toBe(2);
    expect(parseConfig({}).trainer.dataParallel).toBe(1);
    expect(issuesOf(() => parseConfig({ trainer: { dataParallel: 3, mode: "sync" } }))[0]?.path).toBe(
      "trainer.dataParallel",
    );
  });

  it("skipUniformGroups needs a group baseline", () => {
    const issues = issuesOf(() => parseConfig({ trainer: { skipUniformGroups: true, estimator: "reinforce++" } }));
    expect(issues).toHaveLength(1);
    expect(issues[0]?.path).toBe("trainer.skipUniformGroups");
    expect(issues[0]?.message).toMatch(/grpo or rloo/);
    expect(parseConfig({ trainer: { skipUniformGroups: true, estimator: "rloo" } }).trainer.skipUniformGroups).toBe(
      true,
    );
  });

  it("rejects a task listed twice in the mix", () => {
    const issues = issuesOf(() => parseConfig({ tasks: { mix: [{ name: "db" }, { name: "db" }] } }));
    expect(issues[0]?.path).toBe("tasks.mix[1].name");
  });

  it("applies environment overrides, then --set overrides, as YAML scalars", async () => {
    const dir = tempDir("agentrl-config-");
    const file = join(dir, "exp.yaml");
    writeFileSync(file, "experimentId: sweep-1\ntrainer:\n  maxSteps: 3\n");
    const config = await loadConfig(file, {
      env: { AGENTRL__trainer__maxSteps: "9", AGENTRL__trainer__taskAdvantageNorm: "false" },
      overrides: ["rollout.groupSize=4"],
    });
    expect(config.experimentId).toBe("sweep-1");
    expect(config.trainer.maxSteps).toBe(9);
    expect(config.trainer.taskAdvantageNorm).toBe(false);
    expect(config.rollout.groupSize).toBe(4);
  });

  it("collects only AGENTRL__ variables", () => {
    expect(envOverrides({ AGENTRL__a__b: "1", OTHER: "2" })).toEqual(["a.b=1"]);
  });

  it("picks a list entry by its index, keeping the other entries", async () => {
    const dir = tempDir("agentrl-config-");
    const file = join(dir, "mix.yaml");
    writeFileSync(file, "tasks:\n  mix:\n    - { name: db, weight: 2 }\n    - { name: os, weight: 1 }\n");
    const config = await loadConfig(file, {
      env: { AGENTRL__tasks__mix__0__weight: "3" },
      overrides: ["tasks.mix.1.trainInstances=16"],
    });
    expect(config.tasks.mix.map((t) => [t.name, t.weight, t.trainInstances])).toEqual([
      ["db", 3, 10_000],
      ["os", 1, 16],
    ]);
    const message = (assignment: string) =>
      loadConfig(file, { overrides: [assignment] }).then(
        () => "",
        (e: unknown) => (e as ValidationError).issues.map((i) => `${i.path}: ${i.message}`).join("; "),
      );
    expect(await message("tasks.mix.2.weight=1")).toBe(
      "tasks.mix.2: tasks.mix is a list of 2: an index from 0 to 1 picks an entry",
    );
    expect(await message("tasks.mix.db.weight=1")).toMatch(/^tasks\.mix\.db: tasks\.mix is a list of 2/);
    // without a config file the mix is the schema's default, not in the raw config: say what to do
    await expect(loadConfig(undefined, { overrides: ["tasks.mix.0.weight=2"] })).rejects.toThrow(
      /tasks\.mix: is not set here, so it has no entry 0: set the whole list \(tasks\.mix=\[\.\.\.\]\)/,
    );
  });

  it("refuses an override through a scalar", () => {
    const target: Record<string, unknown> = { trainer: 3 };
    expect(() => applyOverride(target, "trainer.maxSteps=2")).toThrow(ValidationError);
    expect(() => applyOverride(target, "noequals")).toThrow(/path=value/);
  });

  it("reports unreadable and malformed files", async () => {
    await expect(loadConfig("/nonexistent/exp.yaml")).rejects.toThrow(/cannot read/);
    const dir = tempDir("agentrl-config-");
    writeFileSync(join(dir, "list.yaml"), "- 1\n- 2\n");
    await expect(loadConfig(join(dir, "list.yaml"))).rejects.toThrow(/must hold a mapping/);
  });
});

describe("agentrl config validate", () => {
  it("exits 2 with one line naming the field on a bad config", async () => {
    const dir = tempDir("agentrl-cli-");
    const file = join(dir, "bad.yaml");
    writeFileSync(file, "trainer:\n  estimator: ppo\n");
    const result = await agentrl(["config", "validate", file]);
    expect(result.status).toBe(2);
    const lines = result.stderr.trim().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/^agentrl: invalid config: trainer\.estimator: .*"grpo"/);
  });

  it("accepts a good config and prints the resolved one", async () => {
    const dir = tempDir("agentrl-cli-");
    const file = join(dir, "ok.json");
    writeFileSync(file, JSON.stringify({ trainer: { maxSteps: 2 } }));
    const result = await agentrl(["config", "validate", file, "--print", "--set", "seed=7"]);
    expect(result.status).toBe(0);
    const resolved = JSON.parse(result.stdout) as { seed: number; trainer: { maxSteps: number } };
    expect(resolved.seed).toBe(7);
    expect(resolved.trainer.maxSteps).toBe(2);
  });
});

describe("configuration reference", () => {
  it("documents every field with a help text", () => {
    const undocumented = configFields()
      .filter((f) => f.description.trim() === "")
      .map((f) => f.path);
    expect(undocumented).toEqual([]);
  });

  it("is what docs/configuration.md holds (run `agentrl config docs > docs/configuration.md`)", () => {
    expect(readFileSync("docs/configuration.md", "utf8")).toBe(configReferenceMarkdown());
  });
});
