import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
import { agentBenchDataDir, mysqlAvailable } from "../agentbench/support.ts";
import { waitFor } from "../env/helpers.ts";
import { runProcess } from "../support/cli.ts";
import { setDummyAwsCredentials } from "../support/moto.ts";
import { expectFinishedRun } from "../support/runChecks.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The README's command blocks, run as a newcomer pastes them: from the repository root, in a
 * terminal (`script` gives bash a pty, so `cmd &` … `kill %1` stop a whole job as they do for a
 * user), servers in the background. Every ```bash block of the README must be listed in BLOCKS
 * below, so a new or changed block fails this test until it is exercised here. Long runs run with
 * a smaller `--set` appended, and only after checking that the README's text is the command named.
 * The two training runs (npm start on the local transport, the example experiment against moto)
 * are this suite's end-to-end pipeline runs: each ends with every invariant of a finished run
 * checked on its stores (test/support/runChecks.ts).
 */

/** Trainer steps of the README's two training runs: two, so a step trains on top of another's ledger. */
const STEPS = 2;

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const README = readFileSync(join(ROOT, "README.md"), "utf8");

interface Block {
  readonly heading: string;
  readonly code: string;
}

/** Every ```bash block with the heading it sits under. */
function bashBlocks(markdown: string): Block[] {
  const blocks: Block[] = [];
  let heading = "";
  const lines = markdown.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (/^#{1,4} /.test(line)) heading = line.replace(/^#+ /, "");
    if (line.trim() !== "```bash") continue;
    const code: string[] = [];
    for (i++; i < lines.length && (lines[i] as string).trim() !== "```"; i++) code.push(lines[i] as string);
    blocks.push({ heading, code: code.join("\n") });
  }
  return blocks;
}

const BLOCKS = bashBlocks(README);

/** The one block under `heading` (the n-th when there are several). */
function block(heading: string, n = 0): string {
  const found = BLOCKS.filter((b) => b.heading === heading);
  const code = found[n]?.code;
  if (code === undefined) throw new Error(`README has no bash block #${n} under "${heading}"`);
  return code;
}

/** How each block is exercised; the README's blocks must be exactly these, in this order. */
const EXERCISED: ReadonlyArray<[string, string]> = [
  ["Quickstart", "npm start run with a 1-step --set; npm test is this suite"],
  ["What to do next", "view started in the background, its pages fetched"],
  ["What to do next", "run with --n 1"],
  ["What to do next", "checked to be the command npm start printed"],
  ["Look inside a run", "the same view command as above"],
  ["Evaluate a run or a model", "run with --n 1"],
  [
    "Train longer: learning, measured",
    "an hour of runs: npm run learning end to end (one step, two arms at a time) is test/e2e/learning.test.ts's; its config is validated by test/unit/quickstart.test.ts",
  ],
  [
    "AgentBench tasks",
    "env check run as written; the fetch is test/agentbench/fetch.test.ts's (a loopback mirror: no network here)",
  ],
  ["Bring your own model", "run as written"],
  ["Your own experiment", "run as written"],
  ["A sweep on this machine", "the dry run as written; the full run is test/infra/sweep.test.ts's"],
  ["Against moto or LocalStack", "run as written with a 2-step --set; its stores then checked as a finished run"],
  ["Deploying to AWS", "synth as written; the rehearsal is test/infra/rehearse.test.ts's"],
];

/** A terminal control sequence (ESC [ … letter), built from its code so the source holds no control character. */
const ANSI_ESCAPE = new RegExp(`${String.fromCharCode(27)}\\[[0-9;?]*[A-Za-z]`, "g");

/** Runs a script in bash inside a pseudo-terminal, from the repository root; output is stdout and stderr together. */
async function paste(script: string, timeoutMs: number): Promise<{ status: number | null; output: string }> {
  const result = await runProcess("script", ["-qefc", `bash -m -c ${shellQuote(script)}`, "/dev/null"], {
    cwd: ROOT,
    timeoutMs,
    env: { AGENTRL_LOG_LEVEL: "info", NO_COLOR: "1" },
  });
  // what a terminal would have drawn over: npx's spinner, cursor moves, colours
  const output = (result.stdout + result.stderr)
    .replace(ANSI_ESCAPE, "")
    .replace(/[\u2800-\u28ff]/g, "")
    .replace(/\r\n/g, "\n");
  return { status: result.status, output };
}

function shellQuote(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

/** `--n 20` → `--n N` and the run folder's time → `<time>`: the parts that differ between a run and the README. */
function normalize(text: string, runName: string): string {
  return text
    .replaceAll(runName, "quickstart-<time>")
    .replace(/--n \d+/g, "--n N")
    .replace(/ {2,}#.*$/gm, "")
    .trim();
}

describe("the README's command blocks", () => {
  const runs: string[] = [];
  const children: ChildProcess[] = [];
  afterAll(() => {
    for (const child of children) if (child.pid) process.kill(-child.pid, "SIGTERM");
    for (const run of runs) rmSync(run, { recursive: true, force: true });
  });

  it("are each exercised here (a new or changed block fails until it is)", () => {
    expect(BLOCKS.map((b) => b.heading)).toEqual(EXERCISED.map(([heading]) => heading));
  });

  let runName = "";
  it("npm start ends with the run folder and the next commands, as README shows them", async () => {
    expect(block("Quickstart")).toBe(
      [
        "npm ci && npm start     # the whole pipeline on this machine (embedded default: local queue + local store)",
        "npm ci && npm test      # the whole test suite (starts its own moto server for the AWS-API tests)",
      ].join("\n"),
    );
    const before = new Set(existsSync(join(ROOT, "runs")) ? readdirSync(join(ROOT, "runs")) : []);
    // node_modules is installed already (npm ci is the suite's own setup); two steps and one instance per task
    const { status, output } = await paste(`npm start -- --set trainer.maxSteps=${STEPS} --eval-n 1`, 400_000);
    const created = readdirSync(join(ROOT, "runs")).filter(
      (name) => !before.has(name) && name.startsWith("quickstart-"),
    );
    runs.push(...created.map((name) => join(ROOT, "runs", name)));
    expect(output).not.toMatch(/\n\s+at /);
    expect(status).toBe(0);
    expect(created).toHaveLength(1);
    runName = created[0] as string;
    const printed = output.slice(output.lastIndexOf("run folder: runs/")); // the last: the first is said at the start
    expect(printed).toMatch(new RegExp(`^run folder: runs/${runName}\\n\\nnext:\\n`));
    expect(output).toMatch(new RegExp(`^report: runs/${runName}/report.html$`, "m"));

    // the README's sample output ends the same way, and its "what to do next" blocks are these commands
    const shown = README.slice(README.indexOf("run folder: runs/quickstart-"));
    const shownRun = /run folder: runs\/(quickstart-\S+)/.exec(shown)?.[1] as string;
    const shownNext = normalize(shown.slice(0, shown.indexOf("```")), shownRun);
    expect(normalize(printed, runName)).toBe(shownNext);
    const nextCommands = shownNext.split("\n").filter((l) => l.startsWith("npx "));
    const readmeNext = [0, 1, 2]
      .flatMap((n) => block("What to do next", n).split("\n"))
      .map((l) =>
        l
          .replace(/\s+#.*$/, "")
          .replace(/--n \d+/g, "--n N")
          .trim(),
      );
    for (const command of nextCommands) expect(readmeNext).toContain(command);

    await expectFinishedRun(join(ROOT, "runs", runName), STEPS);
  }, 420_000);

  it("agentrl view serves that run folder: the list and the report, each with its navigation", async () => {
    expect(runName).not.toBe("");
    const command = block("What to do next", 0);
    expect(command).toBe(block("Look inside a run"));
    const args = command
      .replace(/\s+#.*$/, "")
      .split(/\s+/)
      .slice(1);
    expect(args).toEqual(["agentrl", "view", "runs/quickstart-<time>"]);
    // port 0 instead of 8080, which another program may hold on a shared machine
    const child = spawn("npx", ["agentrl", "view", `runs/${runName}`, "--port", "0"], {
      cwd: ROOT,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    children.push(child);
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        const match = /^(http:\/\/127\.0\.0\.1:\d+)$/m.exec(out);
        if (match?.[1]) resolve(match[1]);
      });
      child.once("exit", (code) => reject(new Error(`agentrl view exited (${code})`)));
    });
    for (const path of ["/", "/report"]) {
      const response = await fetch(`${url}${path}`);
      expect(response.status).toBe(200);
      expect(await response.text()).toContain('<a style="color:#fff;margin-right:16px" href="/">trajectories</a>');
    }
  }, 120_000);

  it("agentrl eval --run evaluates that run's versions (README's --n 20 run as --n 1)", async () => {
    expect(runName).not.toBe("");
    const scripts = [block("What to do next", 1), block("Evaluate a run or a model")];
    expect(scripts[0]).toBe("npx agentrl eval --run runs/quickstart-<time> --policy 0 newest --n 20");
    expect(scripts[1]).toMatch(
      /^npx agentrl eval --run runs\/quickstart-<time> --policy newest --tasks db os --n 20 /m,
    );
    const script = scripts
      .join("\n")
      .replaceAll("<time>", runName.replace("quickstart-", ""))
      .replace(/--n 20/g, "--n 1");
    const { status, output } = await paste(script, 300_000);
    expect(status).toBe(0);
    // The success tables' rows (per-kind tables follow for tasks with kinds: "| v2 | 50.0 (2) |"),
    // and the newest against v0, instance by instance.
    expect(output.match(new RegExp(`^\\| v${STEPS} \\| [\\d.]+ \\|`, "gm")), output).toHaveLength(2);
    expect(output.match(/^\| v0 \| [\d.]+ \|/gm), output).toHaveLength(1);
    expect(output).toMatch(new RegExp(`^\\| v${STEPS} − v0 \\| instances \\| difference \\|`, "m"));
    expect(output).toMatch(new RegExp(`written to runs/${runName}/eval-`));
  }, 320_000);

  it.skipIf(!agentBenchDataDir() || !mysqlAvailable())(
    "AgentBench tasks: env check of dbbench-std, as written, on the data the fetch writes",
    async () => {
      const [fetchLine, checkLine] = block("AgentBench tasks").split("\n");
      expect(fetchLine).toMatch(/^npx agentrl data fetch agentbench {2,}#/);
      const { status, output } = await paste(checkLine as string, 300_000);
      expect(output).toMatch(/dbbench-std test\[0\.\.300\) dbbench-std-expert: success 99\.0% \(297\/300\)/);
      expect(output.match(/expert miss: index/g)).toHaveLength(3);
      expect(status).toBe(0);
    },
    320_000,
  );

  it("Bring your own model: import, serve in the background, ask, stop, export", async (context) => {
    // The README's own folders (and the checkpoint store's sibling for temp files): removed before
    // (a run killed mid-way may have left them) and after.
    const removeFolders = () => {
      for (const dir of ["/tmp/tiny-qwen2", "/tmp/tiny-ckpt", "/tmp/tiny-ckpt.tmp", "/tmp/tiny-qwen2-out"])
        rmSync(dir, { recursive: true, force: true });
    };
    removeFolders();
    context.onTestFinished(removeFolders);
    const { output } = await paste(block("Bring your own model"), 300_000);
    expect(output).toMatch(/\{"event":"imported","from":"\/tmp\/tiny-qwen2","version":0,/);
    expect(output).toContain("serving policy v0 from folder /tmp/tiny-ckpt (pinned)");
    expect(output).toMatch(/"prompt_token_ids":\[/);
    expect(output).toMatch(
      /\{"event":"exported","out":"\/tmp\/tiny-qwen2-out","version":0,"architecture":"Qwen2ForCausalLM","dtype":"BF16"/,
    );
    // the server is gone: kill %1 stopped the whole job, npx and the node under it
    const probe = await fetch("http://127.0.0.1:8011/health").then(
      () => "answering",
      () => "stopped",
    );
    expect(probe).toBe("stopped");
    // the import left its folder and nothing beside it (the store's temp folder is removed when done)
    expect(existsSync("/tmp/tiny-ckpt/policies/v0/manifest.json")).toBe(true);
    expect(existsSync("/tmp/tiny-ckpt.tmp")).toBe(false);
    // the README's account of the export
    expect(readdirSync("/tmp/tiny-qwen2-out").sort()).toEqual([
      "config.json",
      "generation_config.json",
      "model.safetensors",
      "tokenizer.json",
      "tokenizer_config.json",
    ]);
    for (const file of ["tokenizer.json", "tokenizer_config.json"])
      expect(readFileSync(join("/tmp/tiny-qwen2-out", file))).toEqual(readFileSync(join("/tmp/tiny-qwen2", file)));
    for (const file of ["config.json", "generation_config.json"])
      expect(JSON.parse(readFileSync(join("/tmp/tiny-qwen2-out", file), "utf8"))).toEqual(
        JSON.parse(readFileSync(join("/tmp/tiny-qwen2", file), "utf8")),
      );
  }, 320_000);

  it("Your own experiment and the sweep's dry run, as written", async () => {
    const validate = await paste(block("Your own experiment"), 60_000);
    expect(validate.output).toMatch(/^configs\/example-experiment.yaml: valid \(experiment example\)$/m);
    expect(validate.status).toBe(0);
    const sweep = block("A sweep on this machine").split("\n");
    expect(sweep[1]).toMatch(/^npx agentrl sweep infra\/examples\/sweep-lr.yaml {2,}#/);
    const dry = await paste(sweep[0] as string, 60_000);
    expect(dry.output).toMatch(/sweep lr: 4 experiments/);
    expect(dry.status).toBe(0);
  }, 130_000);

  it("Deploying to AWS: cdk synth of the example experiment, with the cdk-nag checks, as written", async () => {
    const lines = block("Deploying to AWS").split("\n");
    expect(lines[0]).toMatch(/^npx cdk synth --quiet -c config=configs\/example-experiment.yaml {2,}#/);
    expect(lines[1]).toMatch(/^npm run rehearse {2,}#/);
    const { status, output } = await paste(lines[0] as string, 300_000);
    expect(output).toContain("Successfully synthesized");
    expect(status).toBe(0);
  }, 320_000);

  it("Against moto: the example experiment trains on the AWS API (two steps), and its stores hold a finished run", async () => {
    const code = block("Against moto or LocalStack");
    const lines = code.split("\n");
    expect(lines[0]).toBe("python3 -m moto.server -H 127.0.0.1 -p 5000 &");
    expect(lines[2]).toBe(
      "  npx agentrl train -c configs/example-experiment.yaml --transport aws --endpoint http://127.0.0.1:5000",
    );
    const stamp = `readme-moto-${Date.now()}`;
    const run = join(ROOT, "runs", stamp);
    runs.push(run);
    // The script keeps moto serving until the run's stores have been read here, then stops it.
    const handshake = tempDir("agentrl-readme-moto-");
    const trained = join(handshake, "trained");
    const checked = join(handshake, "checked");
    const script = [
      `${code} --set trainer.maxSteps=${STEPS} --eval-n 1 --run-dir runs/${stamp} --set transport.queuePrefix=${stamp}`,
      "rc=$?",
      `echo $rc > ${trained}`,
      `for _ in $(seq 600); do [ -e ${checked} ] && break; sleep 0.2; done`,
      "kill %1",
      "exit $rc",
    ].join("\n");
    let pasteEnded = false;
    const pasted = paste(script, 400_000).finally(() => {
      pasteEnded = true;
    });
    let checkFailure: unknown;
    try {
      await waitFor(() => existsSync(trained) || pasteEnded, 400_000, "the README's moto run to end", 500);
      // A run that failed is reported by the exit status below, with its output.
      if (existsSync(trained) && readFileSync(trained, "utf8").trim() === "0") {
        setDummyAwsCredentials();
        await expectFinishedRun(run, STEPS).catch((error: unknown) => {
          checkFailure = error;
        });
      }
    } finally {
      writeFileSync(checked, "");
    }
    const { status, output } = await pasted;
    expect(output).not.toMatch(/\n\s+at /);
    expect(status).toBe(0);
    expect(output).toMatch(new RegExp(`^${STEPS} trainer steps$`, "m"));
    expect(output).toMatch(new RegExp(`^run folder: runs/${stamp}$`, "m"));
    if (checkFailure) throw checkFailure;
  }, 420_000);
});
