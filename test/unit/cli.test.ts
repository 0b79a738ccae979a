import { spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { baseCheckpointOf } from "../../cli/commands/train.ts";
import { dropPartialLastLine } from "../../cli/commands/trainer.ts";
import { BASE_CHECKPOINT_DIR } from "../../cli/launch/pipeline.ts";
import { exampleExpert } from "../../env-images/example/index.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { EvalReport } from "../../shared/protocol/metrics.ts";
import { AGENTRL_BIN, agentrl } from "../support/cli.ts";
import { processesNaming } from "../support/processes.ts";
import { scriptedPolicyServer } from "../support/scriptedPolicy.ts";
import { tempDir } from "../support/tmp.ts";

describe("agentrl run commands reject bad input with one line", () => {
  it.each([
    [["train", "--transport", "local", "--endpoint", "http://127.0.0.1:1"], /--endpoint: needs --transport aws/],
    [["train", "--transport", "kafka"], /--transport must be "local" or "aws", got "kafka"/],
    [["train", "--eval-n", "-3"], /--eval-n must be an integer >= 0/],
    [["train", "--base", "/nonexistent-base"], /--base: \/nonexistent-base holds no checkpoint/],
    [["train", "--set", "policy.base=/nonexistent-base"], /policy.base: \/nonexistent-base holds no checkpoint/],
    [["eval", "--policy", "latest"], /--policy must be a version number, "newest" or an http\(s\) URL/],
    [["eval", "--policy", "3", "--split", "dev"], /--split must be "train" or "test"/],
    [["eval", "--policy", "3", "--temperature", "hot"], /--temperature must be a number from 0 to 2, got "hot"/],
    [["eval", "--policy", "3", "--samples", "0"], /--samples must be an integer >= 1/],
    [["eval", "--policy", "3", "--top-p", "0"], /--top-p must be a number above 0 and at most 1, got "0"/],
    [["eval", "--policy", "3", "--top-p", "0.9"], /--top-p: nucleus sampling needs --temperature > 0/],
    [
      ["eval", "--policy", "3", "--samples", "4"],
      /--samples: more than one sample per instance needs --temperature > 0/,
    ],
    [["report", "/nonexistent-run"], /is not a run folder/],
    [["view", "/nonexistent-run"], /\/nonexistent-run does not exist or is not a folder/],
    [["view", "/tmp", "--transport", "gcp"], /--transport must be "local" or "aws", got "gcp"/],
    [
      ["env", "pool", "--controller", "notaurl", "--task", "db"],
      /--controller must be an http\(s\) URL, got "notaurl"/,
    ],
    [
      ["env", "pool", "--controller", "http://127.0.0.1:1", "--task", "db", "--min", "5", "--max", "2"],
      /--min 5 exceeds --max 2/,
    ],
  ])("agentrl %j", async (args, message) => {
    const result = await agentrl(args);
    expect(result.status).not.toBe(0);
    expect(result.stderr).toMatch(message);
    expect(result.stdout).toBe("");
  });

  it("documents every run command", async () => {
    for (const command of ["train", "start", "eval", "report", "view"]) {
      const result = await agentrl([command, "--help"]);
      expect(result.status).toBe(0);
      expect(result.stdout).toMatch(/^Usage: agentrl /);
    }
  });
});

describe("agentrl train's base checkpoint", () => {
  it("is --base, else the config's policy.base, else the committed warm-up", () => {
    const dir = tempDir("agentrl-base-");
    const flag = join(dir, "flag");
    const configured = join(dir, "configured");
    for (const d of [flag, configured]) mkdirSync(join(d, "policies"), { recursive: true });
    const config = parseConfig({ policy: { base: configured } });
    expect(baseCheckpointOf(config, { base: flag })).toBe(flag);
    expect(baseCheckpointOf(config, {})).toBe(configured);
    expect(baseCheckpointOf(parseConfig({}), {})).toBe(BASE_CHECKPOINT_DIR);
  });
});

describe("agentrl eval --policy newest", () => {
  it("says so when the checkpoint store holds no version", async () => {
    const empty = tempDir("agentrl-empty-store-");
    const result = await agentrl(["eval", "--policy", "newest", "--set", `transport.localDir=${empty}`]);
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(/--policy: the checkpoint store \(.*\) holds no policy version yet/);
  });

  it("measures the newest version and names it in the report", async () => {
    const dir = tempDir("agentrl-eval-newest-");
    cpSync(join(BASE_CHECKPOINT_DIR, "policies"), join(dir, "store", "objects", "checkpoints", "policies"), {
      recursive: true,
    });
    const out = join(dir, "out");
    const result = await agentrl([
      "eval",
      "--policy",
      "newest",
      "--tasks",
      "example",
      "--n",
      "2",
      "--set",
      `transport.localDir=${join(dir, "store")}`,
      "--out",
      out,
    ]);
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/^\| v0 \| /m);
    const report = EvalReport.parse(JSON.parse(readFileSync(join(out, "eval-v0.json"), "utf8")));
    expect(report.policy).toBe("v0");
    expect(report.outcomes?.map((o) => [o.task, o.sample])).toEqual([
      ["example", 0],
      ["example", 0],
    ]);
  }, 120_000);
});

describe("agentrl eval with several policies", () => {
  it("plays each on the same instances and compares the last with the first, instance by instance", async () => {
    const dir = tempDir("agentrl-eval-several-");
    cpSync(join(BASE_CHECKPOINT_DIR, "policies"), join(dir, "store", "objects", "checkpoints", "policies"), {
      recursive: true,
    });
    const expert = await scriptedPolicyServer(exampleExpert);
    const out = join(dir, "out");
    try {
      const result = await agentrl([
        ...["eval", "--policy", "0", `${expert.server.url}/v1`, "--model", "expert"],
        ...["--tasks", "example", "--n", "4", "--set", `transport.localDir=${join(dir, "store")}`, "--out", out],
      ]);
      expect(result.stderr).not.toMatch(/\n\s+at /);
      expect(result.status, result.stderr).toBe(0);
      // one success table with both rows, then the paired comparison of the last with the first
      expect(result.stdout).toMatch(/^\| v0 \| [\d.]+ \| [\d.]+ \|\n\| expert \| 100\.0 \| 100\.0 \|$/m);
      expect(result.stdout).toMatch(
        /^\| expert − v0 \| instances \| difference \| 95% interval \| better \/ worse \|$/m,
      );
      expect(result.stdout).toMatch(/^\| example \| 4 \| \+[\d.]+ \| /m);
      expect(readFileSync(join(out, "eval.md"), "utf8")).toBe(`${result.stdout.split("\n\nwritten to ")[0]}\n`);
      const reports = ["eval-v0.json", "eval-expert.json"].map((file) =>
        EvalReport.parse(JSON.parse(readFileSync(join(out, file), "utf8"))),
      );
      const played = reports.map((r) => r.outcomes?.map((o) => `${o.task} ${o.index}`).sort());
      expect(played[0]).toHaveLength(4);
      expect(played[1]).toEqual(played[0]);
      expect(expert.state.requests).toBeGreaterThan(0);
    } finally {
      await expert.server.close();
    }
  }, 120_000);

  it("refuses a policy named twice, before anything starts", async () => {
    const dir = tempDir("agentrl-eval-twice-");
    cpSync(join(BASE_CHECKPOINT_DIR, "policies"), join(dir, "store", "objects", "checkpoints", "policies"), {
      recursive: true,
    });
    const result = await agentrl([
      ...["eval", "--policy", "0", "newest", "--tasks", "example"],
      ...["--set", `transport.localDir=${join(dir, "store")}`, "--out", join(dir, "out")],
    ]);
    expect(result.status).toBe(2);
    expect(result.stderr).toContain("--policy: names v0 twice (give each version or URL once)");
    expect(existsSync(join(dir, "out", "eval-v0.json"))).toBe(false);
  });
});

describe("agentrl trainer's metrics file after a kill mid-write", () => {
  it("loses only the partial last line, so the next line is readable", async () => {
    const file = join(tempDir("agentrl-metrics-"), "metrics.jsonl");
    const whole = `${JSON.stringify({ step: 1 })}\n${JSON.stringify({ step: 2 })}\n`;
    writeFileSync(file, `${whole}{"schemaVersion":1,"st`);
    expect(await dropPartialLastLine(file)).toBe(22);
    expect(readFileSync(file, "utf8")).toBe(whole);
    expect(await dropPartialLastLine(file)).toBe(0); // a whole file is left alone
    expect(readFileSync(file, "utf8")).toBe(whole);
    writeFileSync(file, '{"no newline at all"');
    expect(await dropPartialLastLine(file)).toBe(20);
    expect(readFileSync(file, "utf8")).toBe("");
    expect(await dropPartialLastLine(join(tempDir("agentrl-metrics-"), "absent.jsonl"))).toBe(0);
  });
});

describe("agentrl train stopped while its roles start", () => {
  it("ends as interrupted (exit 130, no stack), leaving no role behind", async () => {
    const runDir = join(tempDir("agentrl-stop-early-"), "run");
    // One task: its env stack starts quickest.
    const sets = ["trainer.maxSteps=1", 'tasks.mix=[{"name":"db"}]'].flatMap((s) => ["--set", s]);
    const child = spawn(process.execPath, [AGENTRL_BIN, "start", "--run-dir", runDir, ...sets], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));
    // The current policy server has been spawned and has not yet announced its URL: the run is starting.
    const started = Date.now();
    while (!existsSync(join(runDir, "logs", "policy-current.log")) && Date.now() - started < 90_000)
      await new Promise((r) => setTimeout(r, 20));
    expect(existsSync(join(runDir, "logs", "policy-current.log")), stderr).toBe(true);
    expect(stderr).not.toContain("pipeline running");
    child.kill("SIGTERM");
    expect(await exited, stderr).toBe(130);
    expect(stderr).not.toContain("unexpected error");
    expect(stdout).toMatch(/^interrupted after 0 trainer steps$/m);
    expect(processesNaming(runDir)).toEqual([]);
  }, 120_000);
});
