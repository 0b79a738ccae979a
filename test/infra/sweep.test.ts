import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { expandGrid, loadSweepSpec, parseSweepSpec, type SweepSpecInput } from "../../shared/config/sweep.ts";
import { ValidationError } from "../../shared/errors.ts";
import { type ExperimentRunner, runSweep } from "../../trainer-image/sweep/run.ts";
import { agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";
import { REPOSITORY_ROOT } from "./synth.ts";

const spec: SweepSpecInput = {
  name: "lr",
  base: { trainer: { maxSteps: 3 }, rollout: { groupSize: 4 } },
  grid: { "trainer.learningRate": [0.0001, 0.0003, 0.5], "rollout.groupSize": [2, 8] },
};

describe("expandGrid", () => {
  it("expands the Cartesian product in grid order, the last field varying fastest", () => {
    const points = expandGrid(parseSweepSpec(spec));
    expect(
      points.map((p) => [p.id, p.assignments["trainer.learningRate"], p.assignments["rollout.groupSize"]]),
    ).toEqual([
      ["lr-0", 0.0001, 2],
      ["lr-1", 0.0001, 8],
      ["lr-2", 0.0003, 2],
      ["lr-3", 0.0003, 8],
      ["lr-4", 0.5, 2],
      ["lr-5", 0.5, 8],
    ]);
    // Each point is a full, validated config: base values kept, grid values set, defaults filled.
    expect(points[3]?.config.trainer).toMatchObject({ maxSteps: 3, learningRate: 0.0003 });
    expect(points[3]?.config.rollout.groupSize).toBe(8);
    expect(points[3]?.config.experimentId).toBe("lr-3");
    expect(points[3]?.config.rollout.maxTurns).toBe(20);
    // Deterministic: the same spec gives the same points.
    expect(expandGrid(parseSweepSpec(spec))).toEqual(points);
  });

  it("names the grid point and the config field that fail validation", () => {
    const bad = parseSweepSpec({ ...spec, grid: { "rollout.groupSize": [4, 1] } });
    expect(() => expandGrid(bad)).toThrow(ValidationError);
    expect(() => expandGrid(bad)).toThrow(/sweep grid point 1 \(rollout\.groupSize=1\).*rollout\.groupSize/);
    const unknown = parseSweepSpec({ ...spec, grid: { "trainer.learningRat": [0.1] } });
    expect(() => expandGrid(unknown)).toThrow(/trainer\.learningRat: unknown field/);
  });

  it("sweeps one entry of a list the base has, keeping the others", () => {
    const base = { tasks: { mix: [{ name: "db" }, { name: "os", weight: 2 }] } };
    const points = expandGrid(parseSweepSpec({ name: "pool", base, grid: { "tasks.mix.1.trainInstances": [16, 64] } }));
    expect(points.map((p) => p.config.tasks.mix.map((t) => [t.name, t.weight, t.trainInstances]))).toEqual([
      [
        ["db", 1, 10_000],
        ["os", 2, 16],
      ],
      [
        ["db", 1, 10_000],
        ["os", 2, 64],
      ],
    ]);
    const past = parseSweepSpec({ name: "pool", base, grid: { "tasks.mix.2.weight": [1] } });
    expect(() => expandGrid(past)).toThrow(
      /tasks\.mix\.2: tasks\.mix is a list of 2: an index from 0 to 1 picks an entry/,
    );
  });

  it("rejects malformed specs naming the field", () => {
    expect(() => parseSweepSpec({ ...spec, grid: {} })).toThrow(/grid: needs at least one field/);
    expect(() => parseSweepSpec({ ...spec, grid: { "trainer.maxSteps": [] } })).toThrow(
      /grid\.trainer\.maxSteps: needs at least one value/,
    );
    expect(() => parseSweepSpec({ ...spec, schedule: "every day" })).toThrow(/schedule: must be rate/);
    expect(() => parseSweepSpec({ ...spec, name: "Bad Name" })).toThrow(/name: lowercase/);
    expect(() => parseSweepSpec({ ...spec, grid: { experimentId: ["a"] } })).toThrow(/experimentId is set per grid/);
  });

  it("the shipped example sweep is valid and schedulable", async () => {
    const example = await loadSweepSpec(join(REPOSITORY_ROOT, "infra/examples/sweep-lr.yaml"));
    expect(example.schedule).toBe("cron(0 3 ? * MON *)");
    expect(expandGrid(example).map((p) => p.id)).toEqual(["lr-0", "lr-1", "lr-2", "lr-3"]);
  });

  it("refuses grids past the point limit", () => {
    const values = Array.from({ length: 20 }, (_, i) => i + 1);
    const huge = parseSweepSpec({ name: "big", grid: { "trainer.maxSteps": values, "trainer.batchSize": values } });
    expect(() => expandGrid(huge)).toThrow(/expands to 400 experiments; at most 256/);
  });
});

describe("runSweep", () => {
  it("runs each point with the injected runner, one after another, writing each point's config", async () => {
    const workDir = tempDir("agentrl-sweep-");
    const seen: string[] = [];
    let running = 0;
    const runner: ExperimentRunner = async (point, configFile) => {
      running += 1;
      expect(running).toBe(1);
      const config = JSON.parse(readFileSync(configFile, "utf8")) as { experimentId: string; runDir: string };
      seen.push(`${point.id}:${config.experimentId}:${config.runDir}`);
      await new Promise((r) => setTimeout(r, 5));
      running -= 1;
      return point.assignments["trainer.learningRate"] === 0.5 ? 1 : 0;
    };
    const uploads: string[] = [];
    const results = await runSweep(parseSweepSpec(spec), {
      runner,
      workDir,
      upload: async (point, _dir, files) => {
        uploads.push(`${point.id}:${files.join(",")}`);
      },
    });
    expect(results.map((r) => r.exitCode)).toEqual([0, 0, 0, 0, 1, 1]);
    expect(seen[0]).toBe(`lr-0:lr-0:${join(workDir, "lr-0", "runs")}`);
    expect(uploads[5]).toBe("lr-5:config.json,result.json");
    const failFast = await runSweep(parseSweepSpec({ ...spec, grid: { "trainer.learningRate": [0.5, 0.1] } }), {
      runner,
      workDir,
      failFast: true,
    });
    expect(failFast).toHaveLength(1);
  });
});

describe("agentrl sweep", () => {
  const cli = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    agentrl(["sweep", ...args], { cwd: REPOSITORY_ROOT, env, timeoutMs: 60_000 });

  it("--dry-run prints the grid and runs nothing; a bad grid exits 2 naming the field", async () => {
    const dir = tempDir("agentrl-sweep-cli-");
    const file = join(dir, "sweep.yaml");
    writeFileSync(
      file,
      "name: lr\nbase:\n  trainer:\n    maxSteps: 2\ngrid:\n  trainer.learningRate: [0.0001, 0.5]\n  rollout.groupSize: [2, 4]\n",
    );
    const dry = await cli([file, "--dry-run"]);
    expect(dry.status).toBe(0);
    expect(dry.stdout).toBe(
      [
        "sweep lr: 4 experiments",
        "lr-0\ttrainer.learningRate=0.0001, rollout.groupSize=2",
        "lr-1\ttrainer.learningRate=0.0001, rollout.groupSize=4",
        "lr-2\ttrainer.learningRate=0.5, rollout.groupSize=2",
        "lr-3\ttrainer.learningRate=0.5, rollout.groupSize=4",
        "",
      ].join("\n"),
    );

    const log = join(dir, "ran.log");
    const run = await cli(
      [
        file,
        "--work-dir",
        join(dir, "work"),
        "--runner",
        `node ${join(REPOSITORY_ROOT, "test/infra/fixtures/fakeTrain.mjs")}`,
      ],
      {
        FAKE_TRAIN_LOG: log,
      },
    );
    expect(readFileSync(log, "utf8")).toBe("lr-0\nlr-1\nlr-2\nlr-3\n");
    expect(run.status).toBe(1);
    expect(run.stderr).toContain("2 of 4 experiments failed: lr-2 (exit 3), lr-3 (exit 3)");
    expect(readFileSync(join(dir, "work", "lr-1", "runs", "metrics.jsonl"), "utf8")).toContain('"experimentId":"lr-1"');

    writeFileSync(file, "name: lr\ngrid:\n  rollout.groupSize: [1]\n");
    const bad = await cli([file, "--dry-run"]);
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/sweep grid point 0 \(rollout\.groupSize=1\): rollout\.groupSize/);
  });
});
