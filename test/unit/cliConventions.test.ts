import { cpSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { EXIT_CODES } from "../../cli/exitCodes.ts";
import { BASE_CHECKPOINT_DIR } from "../../cli/launch/pipeline.ts";
import { displayPath, nextStepsText } from "../../cli/runFolder.ts";
import { closest, unknownFieldHint } from "../../cli/suggest.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { EvalReport } from "../../shared/protocol/metrics.ts";
import { agentrl } from "../support/cli.ts";
import { tempDir } from "../support/tmp.ts";

const PACKAGE_VERSION = (
  JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string }
).version;

describe("agentrl's exit codes: 0 done, 1 ran and failed, 2 bad input (nothing ran)", () => {
  it("names the convention once, as the README states it", () => {
    expect(EXIT_CODES).toEqual({ ok: 0, failed: 1, usage: 2, interrupted: 130 });
    const readme = readFileSync(new URL("../../README.md", import.meta.url), "utf8");
    expect(readme).toMatch(/exit code 0 .*, 1 .*, 2 .*, 130 /s);
  });

  it("prints its version and help with exit code 0", async () => {
    for (const flag of ["--version", "-V"]) {
      const result = await agentrl([flag]);
      expect(result.status).toBe(0);
      expect(result.stdout.trim()).toBe(PACKAGE_VERSION);
    }
    expect((await agentrl(["eval", "--help"])).status).toBe(0);
  });

  it.each([
    // unknown command and unknown option, with commander's "Did you mean"
    [["evl"], /unknown command 'evl'\n\(Did you mean eval\?\)/],
    [["eval", "--polcy", "3"], /unknown option '--polcy'\n\(Did you mean --policy\?\)/],
    // a required option's typo is reported as the typo, not as the missing option
    [["policy", "publish", "--frm", "x"], /unknown option '--frm'\n\(Did you mean --from\?\)/],
    // a bad option value (commander's InvalidArgumentError) and a missing one
    [["train", "--transport", "kafka"], /--transport must be "local" or "aws", got "kafka"/],
    [["eval"], /--policy: missing: give a version number, "newest" or an OpenAI-compatible URL/],
    [
      ["eval", "--policy", "http://[bad", "http://127.0.0.1:1/v1"],
      /--policy must be a version number, "newest" or an http\(s\) URL, got "http:\/\/\[bad"/,
    ],
    // config fields: the nearest one at that place, one of that name elsewhere, else what is allowed
    [
      ["config", "validate", "configs/quickstart.yaml", "--set", "trainer.maxStep=3"],
      /trainer.maxStep: unknown field; did you mean trainer.maxSteps\?/,
    ],
    [["train", "--set", "maxSteps=3"], /maxSteps: unknown field; did you mean trainer.maxSteps\?/],
    [["train", "--set", "traner.maxSteps=3"], /traner: unknown field; did you mean trainer\?/],
    [
      ["train", "--set", "trainer.zzzzzzzz=3"],
      /trainer.zzzzzzzz: unknown field; allowed in trainer: mode, batchSize, maxSteps/,
    ],
    // every path named, without "(root)" or a bare errno
    [["train", "-c", "configs/nope.yaml"], /--config: configs\/nope.yaml does not exist; give a YAML or JSON/],
    [["config", "validate", "nope.yaml"], /<file>: nope.yaml does not exist/],
    [["sweep", "nope.yaml", "--dry-run"], /<file>: nope.yaml does not exist; give a sweep spec/],
    [
      ["policy", "export-hf", "--from", "/tmp/nowhere-agentrl", "--out", "/tmp/x"],
      /--from: \/tmp\/nowhere-agentrl does not exist or is not a folder/,
    ],
    [["policy", "import-hf", "/tmp/nowhere-agentrl", "--out", "/tmp/x"], /<hfDir>: \/tmp\/nowhere-agentrl does not/],
    [
      ["view", "/nonexistent-run"],
      /\/nonexistent-run does not exist or is not a folder; give the run folder `npm start`/,
    ],
    [["eval", "--run", "/nonexistent-run"], /--run: \/nonexistent-run does not exist or is not a folder/],
    [["eval", "--run", "/tmp", "-c", "configs/quickstart.yaml"], /--run: give --run or --config, not both/],
  ])("agentrl %j exits 2 with one message", async (args, message) => {
    const result = await agentrl(args);
    expect(result.stderr).toMatch(message);
    expect(result.stderr).not.toMatch(/\(root\)|ENOENT|\n\s+at /);
    expect(result.stdout).toBe("");
    expect(result.status).toBe(2);
  });

  it("eval --run refuses a folder that is no run folder, saying what one holds", async () => {
    const dir = tempDir("agentrl-not-a-run-");
    const result = await agentrl(["eval", "--run", dir]);
    expect(result.stderr).toMatch(
      /--run: .* is not a run folder: it has no config.json \(a run folder holds config.json,/,
    );
    expect(result.status).toBe(2);
  });

  it("exits 1 when a command ran and failed", async () => {
    // a folder that looks like a checkpoint but whose version is incomplete: the export runs and fails
    const dir = tempDir("agentrl-broken-ckpt-");
    mkdirSync(join(dir, "policies", "v0"), { recursive: true });
    const result = await agentrl(["policy", "export-hf", "--from", dir, "--out", join(dir, "out")]);
    expect(result.stderr).toMatch(/^agentrl: /);
    expect(result.status).toBe(1);
  });

  it("policy serve --pin N refuses a version the store lacks before it says it serves anything", async () => {
    const store = tempDir("agentrl-pin-store-");
    const result = await agentrl(
      ["policy", "serve", "--pin", "7", "--port", "0", "--set", `transport.localDir=${store}`],
      {
        env: { AGENTRL_LOG_LEVEL: "info" },
      },
    );
    expect(result.stderr).toMatch(/--pin: version 7 is not published in the checkpoint store .* \(it is empty\)/);
    expect(result.stderr).not.toMatch(/serving policy/);
    expect(result.stdout).not.toMatch(/listening/);
    expect(result.status).toBe(2);
  });
});

describe("agentrl's help says what the commands do", () => {
  it("start names the config it runs; trainer says it publishes every checkpointEvery-th version", async () => {
    const start = await agentrl(["start", "--help"]);
    expect(start.stdout).toMatch(/default\s+configs\/quickstart\.yaml/);
    expect(start.stdout).not.toMatch(/defaults apply without one/);
    const trainer = await agentrl(["trainer", "--help"]);
    expect(trainer.stdout).toMatch(/every\s+trainer\.checkpointEvery-th\s+published/);
    expect(trainer.stdout).not.toMatch(/after every step/);
    const evalHelp = await agentrl(["eval", "--help"]);
    expect(evalHelp.stdout).toMatch(/--run <run-dir>/);
  });
});

describe("did you mean", () => {
  it("suggests near words only", () => {
    expect(closest("polcy", ["policy", "tasks"])).toBe("policy");
    expect(closest("zzz", ["policy", "tasks"])).toBeUndefined();
    expect(unknownFieldHint("tasks.mix[0].nme")).toBe("unknown field; did you mean tasks.mix[0].name?");
    expect(unknownFieldHint("rollout.crossPolicy.stalProbability")).toBe(
      "unknown field; did you mean rollout.crossPolicy.staleProbability?",
    );
  });
});

describe("the run folder and what to do next", () => {
  it("is written relative to the working folder when inside it", () => {
    expect(displayPath(resolve("runs/quickstart-1"))).toBe(join("runs", "quickstart-1"));
    expect(displayPath("/elsewhere/run", "/work/repo")).toBe("/elsewhere/run");
    const text = nextStepsText(resolve("runs/q-1"), { configFile: resolve("configs/quickstart.yaml"), evalN: 20 });
    expect(text).toMatch(/^run folder: runs\/q-1$/m);
    expect(text).toMatch(/^ {2}npx agentrl view runs\/q-1 /m);
    expect(text).toMatch(/^ {2}npx agentrl eval --run runs\/q-1 --policy 0 newest --n 20 /m);
    expect(text).toMatch(/^ {2}npx agentrl train -c configs\/quickstart\.yaml --set trainer\.maxSteps=20 /m);
  });

  it("eval --run evaluates the run's newest version with the run's config, from its own transport/ even when moved", async () => {
    const run = tempDir("agentrl-eval-run-");
    // config.json names a transport folder that no longer exists: the run folder was moved
    const config = parseConfig({
      experimentId: "moved",
      transport: { localDir: "/nonexistent/old-place/transport" },
      tasks: { mix: [{ name: "example" }] },
      evaluation: { instances: 2 },
    });
    writeFileSync(join(run, "config.json"), JSON.stringify(config));
    cpSync(join(BASE_CHECKPOINT_DIR, "policies"), join(run, "transport", "objects", "checkpoints", "policies"), {
      recursive: true,
    });
    const result = await agentrl(["eval", "--run", run], { timeoutMs: 150_000 });
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/^\| v0 \| /m);
    const outs = readdirSync(run).filter((name) => name.startsWith("eval-"));
    expect(outs).toHaveLength(1);
    const report = EvalReport.parse(JSON.parse(readFileSync(join(run, outs[0] as string, "eval-v0.json"), "utf8")));
    expect(report.policy).toBe("v0");
    // the run's evaluation.instances (2), its task mix (example)
    expect(report.outcomes?.map((o) => o.task)).toEqual(["example", "example"]);
  }, 180_000);
});
