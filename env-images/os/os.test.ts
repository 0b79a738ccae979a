import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { afterAll, describe, expect, it } from "vitest";
import { EpisodeSession, scriptedStats, toolSpecs } from "../../shared/env/session.ts";
import type { AssistantMessage } from "../../shared/protocol/openai.ts";
import { osExpert, osRandom, shellOutput } from "./agents.ts";
import { generateOsInstance, OS_FAMILIES, OS_SPLITS, type OsFamily, type OsInstance } from "./generator.ts";
import { taskModule } from "./index.ts";
import { DEFAULT_SANDBOX_LIMITS, OsSandbox, ShellPool, TRUNCATION_NOTE, viewOf } from "./sandbox.ts";
import { createOsTask } from "./task.ts";

const pool = new ShellPool();
const task = createOsTask({ limits: { commandTimeoutMs: 1000 }, pool });
afterAll(() => pool.drain());

function call(name: string, args: unknown, id = "c1"): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  };
}

async function session(index: number) {
  const signal = new AbortController().signal;
  const s = new EpisodeSession(task, await task.start(index, signal));
  return {
    s,
    /** One turn; returns the tool observation and the turn result. */
    async step(name: string, args: unknown) {
      const turn = await s.interact(call(name, args), signal);
      const message = turn.messages[0];
      return { ...turn, text: message?.content ?? "" };
    },
  };
}

function firstTestIndexOf(family: OsFamily): number {
  for (let i = OS_SPLITS.test.start; i < OS_SPLITS.test.end; i++) if (generateOsInstance(i).family === family) return i;
  throw new Error(`no ${family} instance in the test split`);
}

function fingerprint(instance: OsInstance): string {
  const answer = instance.judge.kind === "match" ? instance.judge.answer : "check";
  return JSON.stringify([instance.description, instance.files, answer]);
}

describe("os generator", () => {
  it("is deterministic by index and varies across indices", () => {
    for (const index of [0, 1, 777, 10_000, 10_499]) {
      expect(fingerprint(generateOsInstance(index))).toBe(fingerprint(generateOsInstance(index)));
      expect(generateOsInstance(index).solution).toBe(generateOsInstance(index).solution);
    }
    const distinct = new Set(Array.from({ length: 50 }, (_, i) => fingerprint(generateOsInstance(i))));
    expect(distinct.size).toBe(50);
  });

  it("has disjoint train and test splits of the required sizes, with no shared instance", () => {
    const { train, test } = task.splits;
    expect(train.end - train.start).toBeGreaterThanOrEqual(10_000);
    expect(test.end - test.start).toBeGreaterThanOrEqual(500);
    expect(train.end <= test.start || test.end <= train.start).toBe(true);
    const trainPrints = new Set<string>();
    for (let i = train.start; i < train.start + 3000; i++) trainPrints.add(fingerprint(generateOsInstance(i)));
    for (let i = test.start; i < test.end; i++) expect(trainPrints.has(fingerprint(generateOsInstance(i)))).toBe(false);
  });

  it("covers every family in the test split, and names it as each instance's kind", () => {
    const seen = new Set<OsFamily>();
    for (let i = OS_SPLITS.test.start; i < OS_SPLITS.test.end; i++) seen.add(generateOsInstance(i).family);
    expect([...seen].sort()).toEqual([...OS_FAMILIES].sort());
    // The evaluator's per-kind tables and `npm run learning`'s "what moved" read it.
    const task = createOsTask();
    const kinds = new Set<string | undefined>();
    for (let i = OS_SPLITS.test.start; i < OS_SPLITS.test.end; i++) kinds.add(task.categoryOf?.(i));
    expect([...kinds].sort()).toEqual([...OS_FAMILIES].sort());
  });

  it("rejects indices outside the splits", async () => {
    expect(() => generateOsInstance(-1)).toThrow(RangeError);
    expect(() => generateOsInstance(OS_SPLITS.test.end)).toThrow(/outside the task's indices/);
    await expect(task.start(1.5, new AbortController().signal)).rejects.toThrow(RangeError);
  });

  it("judges check families over the filesystem: untouched state fails", () => {
    for (const family of ["create-file", "rename-ext", "edit-config", "delete-ext"] as const) {
      const instance = generateOsInstance(firstTestIndexOf(family));
      expect(instance.judge.kind).toBe("check");
      if (instance.judge.kind === "check") expect(instance.judge.check(viewOf(instance.files))).toBe(false);
    }
  });
});

describe("os tools", () => {
  it("publishes AgentBench FC's tool names and argument names", () => {
    const specs = toolSpecs(task);
    expect(specs.map((s) => s.function.name)).toEqual(["bash_action", "finish_action", "answer_action"]);
    const params = Object.fromEntries(specs.map((s) => [s.function.name, s.function.parameters]));
    expect(params.bash_action).toMatchObject({ required: ["script"], additionalProperties: false });
    expect(params.answer_action).toMatchObject({ required: ["answer"] });
    expect(Object.keys((params.finish_action as { properties: object }).properties)).toEqual(["thought"]);
    expect(task.maxTurns).toBe(8);
  });

  it("bash_action shows stdout and stderr; files persist between calls but cwd and variables do not", async () => {
    const { step } = await session(firstTestIndexOf("line-count"));
    expect((await step("bash_action", { script: "echo hello" })).text).toBe("The output of the OS:\n\nhello\n");
    expect((await step("bash_action", { script: "true" })).text).toBe("The output of the OS is empty.");
    expect((await step("bash_action", { script: "cat /nope" })).text).toContain("No such file or directory");
    await step("bash_action", { script: "cd /etc && X=1 && echo kept > /home/user/k.txt" });
    const after = await step("bash_action", { script: 'pwd; echo "x=$X"; cat /home/user/k.txt' });
    expect(shellOutput(after.text)).toBe("/home/user\nx=\nkept");
    expect(after.status).toBe("running");
  });

  it("truncates long outputs with AgentBench's note", async () => {
    const { step } = await session(firstTestIndexOf("line-count"));
    const { text } = await step("bash_action", { script: "seq 1 5000" });
    expect(text).toContain(TRUNCATION_NOTE);
    expect(text.length).toBeLessThan(850);
    expect(text).toContain("\n1\n2\n3\n");
  });

  it("answer_action: exact match (trimmed) completes with reward 1, a wrong answer with reward 0", async () => {
    const index = firstTestIndexOf("count-level");
    const expected = generateOsInstance(index);
    if (expected.judge.kind !== "match") throw new Error("count-level is a match family");
    const right = await session(index);
    const won = await right.step("answer_action", { answer: ` ${expected.judge.answer}\n` });
    expect([won.status, won.reward, won.finish]).toEqual(["completed", 1, true]);
    const wrong = await session(index);
    const lost = await wrong.step("answer_action", { answer: `${expected.judge.answer}0` });
    expect([lost.status, lost.reward, lost.text]).toEqual(["completed", 0, "The task is over. Result: failure."]);
    const finished = await (await session(index)).step("finish_action", {});
    expect([finished.status, finished.reward]).toEqual(["completed", 0]);
  });

  it("finish_action judges the final filesystem: nothing done fails, the requested change succeeds", async () => {
    const index = firstTestIndexOf("edit-config");
    const idle = await session(index);
    expect((await idle.step("finish_action", { thought: "done" })).reward).toBe(0);
    const worker = await session(index);
    await worker.step("bash_action", { script: generateOsInstance(index).solution });
    const done = await worker.step("finish_action", { thought: "done" });
    expect([done.status, done.reward]).toEqual(["completed", 1]);
  });

  it("bad calls end the episode with a message naming what was wrong", async () => {
    const missing = await (await session(0)).step("bash_action", { command: "ls" });
    expect(missing.status).toBe("agent validation failed");
    expect(missing.text).toMatch(/invalid arguments for bash_action: .*script/);
    const extra = await (await session(0)).step("answer_action", { answer: "1", confidence: 1 });
    expect(extra.status).toBe("agent validation failed");
    const unknown = await (await session(0)).step("rm_rf", { script: "ls" });
    expect(unknown.status).toBe("agent invalid action");
    expect(unknown.text).toContain("bash_action, finish_action, answer_action");
    const { s } = await session(0);
    const silent = await s.interact({ role: "assistant", content: "I think 3" }, new AbortController().signal);
    expect(silent.status).toBe("agent validation failed");
  });

  it("stops after 8 turns with task limit reached", async () => {
    const { step } = await session(firstTestIndexOf("line-count"));
    let last = await step("bash_action", { script: "echo 0" });
    for (let turn = 1; turn < 8; turn++) last = await step("bash_action", { script: `echo ${turn}` });
    expect([last.status, last.reward, last.metrics.turns]).toEqual(["task limit reached", 0, 8]);
  });
});

describe("os sandbox containment", () => {
  it("cannot read host files or the repository", async () => {
    const hostLines = readFileSync("/etc/passwd", "utf8").split("\n").filter(Boolean);
    const repoFile = fileURLToPath(new URL("./task.ts", import.meta.url));
    const { step } = await session(firstTestIndexOf("line-count"));
    const passwd = await step("bash_action", { script: "cat /etc/passwd" });
    expect(passwd.text).toContain("No such file or directory");
    for (const line of hostLines) expect(passwd.text).not.toContain(line);
    const source = await step("bash_action", {
      script: `cat ${repoFile}; ls ${fileURLToPath(new URL(".", import.meta.url))}`,
    });
    expect(source.text).toContain("No such file or directory");
    expect(source.text).not.toContain("createOsTask");
  });

  it("writes stay in the virtual filesystem", async () => {
    const target = fileURLToPath(new URL("./ESCAPED-by-sandbox.txt", import.meta.url));
    const { step } = await session(firstTestIndexOf("line-count"));
    const written = await step("bash_action", {
      script: `mkdir -p $(dirname ${target}) && echo pwned > ${target} && cat ${target}`,
    });
    expect(shellOutput(written.text)).toBe("pwned");
    expect(existsSync(target)).toBe(false);
    const etc = await step("bash_action", { script: "echo evil >> /etc/hosts; rm -rf / 2>&1 | tail -n 1; echo alive" });
    expect(etc.text).toContain("alive");
    expect(readFileSync("/etc/hosts", "utf8")).not.toContain("evil");
  });

  it("has no network", async () => {
    const { step } = await session(firstTestIndexOf("line-count"));
    const { text } = await step("bash_action", { script: "curl -s http://example.com; wget http://example.com" });
    expect(text).toContain("curl: command not found");
    expect(text).toContain("wget: command not found");
  });

  it("stops runaway loops at the command cap without freezing the process, and keeps going", async () => {
    const { step } = await session(firstTestIndexOf("line-count"));
    await step("bash_action", { script: "echo warm" });
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 20);
    const started = Date.now();
    const loop = await step("bash_action", { script: "while true; do :; done" });
    const elapsed = Date.now() - started;
    clearInterval(ticker);
    // Whichever cap comes first stops it: the 1 s time cap, or just-bash's 100,000-command cap, which
    // an idle fast machine reaches in under a second.
    expect(loop.text).toMatch(
      /\[the command was stopped after 1 s: time limit reached\]|bash: too many commands executed \(>100000\)/,
    );
    expect(elapsed).toBeLessThan(10_000);
    expect(ticks).toBeGreaterThan(3);
    const sleepy = await step("bash_action", { script: "sleep 100" });
    expect(sleepy.text).toContain("time limit reached");
    expect((await step("bash_action", { script: "echo still here" })).text).toContain("still here");
  });

  it("contains huge outputs and memory bombs with a clear observation", async () => {
    const { step } = await session(firstTestIndexOf("line-count"));
    const yes = await step("bash_action", { script: "yes | head -c 10000000" });
    expect(yes.text).toContain("yes: command not found");
    const flood = await step("bash_action", {
      script: "for i in $(seq 1 90000); do echo line $i; done | tail -n 99999",
    });
    expect(flood.text.length).toBeLessThan(900);
    expect(flood.text).toMatch(/truncated because the output is too long|time limit reached|exceeded/);
    const bomb = await step("bash_action", { script: "s=x; for i in $(seq 1 40); do s=$s$s; done; echo $s | wc -c" });
    expect(bomb.text).toMatch(/limit/);
    expect(bomb.status).toBe("running");
    expect((await step("bash_action", { script: "echo ok" })).text).toContain("ok");
  });

  it("terminates a shell thread that ignores the cap, restarts it and reports it", async () => {
    const hanging = new ShellPool({
      spawn: () =>
        new Worker(
          `const { parentPort } = require("node:worker_threads");
           parentPort.on("message", (m) => {
             if (m.type === "reset") parentPort.postMessage({ id: m.id, ok: true, body: { type: "ready" } });
             else for (;;) {}
           });`,
          { eval: true },
        ),
    });
    const sandbox = new OsSandbox(
      { "/home/user/a.txt": "a\n" },
      { ...sandboxLimits(), commandTimeoutMs: 300, hardKillGraceMs: 300 },
      hanging,
    );
    const observation = await sandbox.run("anything", new AbortController().signal);
    expect(observation).toContain("did not stop within the time limit; the machine was restarted");
    expect((await sandbox.snapshot()).read("/home/user/a.txt")).toBe("a\n");
    sandbox.close();
    hanging.drain();
  });

  it("keeps as many shell threads as its sandboxes used at once: the next round starts none", async () => {
    let started = 0;
    const counting = new ShellPool({
      spawn: () => {
        started += 1;
        return new Worker(new URL("./shellWorker.mjs", import.meta.url));
      },
    });
    const signal = new AbortController().signal;
    const round = async (tag: string) => {
      const sandboxes = Array.from(
        { length: 6 },
        // a long command timeout: six threads starting at once on a loaded machine take seconds,
        // and a command timed out would replace its thread
        (_, i) =>
          new OsSandbox(
            { "/home/user/a.txt": `${tag}${i}\n` },
            { ...sandboxLimits(), commandTimeoutMs: 30_000 },
            counting,
          ),
      );
      const outputs = await Promise.all(sandboxes.map((sandbox) => sandbox.run("cat a.txt", signal)));
      for (const sandbox of sandboxes) sandbox.close();
      return outputs.map((text) => text.trim().split("\n").at(-1));
    };
    expect(await round("x")).toEqual(["x0", "x1", "x2", "x3", "x4", "x5"]);
    expect(started).toBe(6);
    // Reused threads start from the new sandboxes' files, not the last round's.
    expect(await round("y")).toEqual(["y0", "y1", "y2", "y3", "y4", "y5"]);
    expect(started).toBe(6);
    counting.drain();
  });

  it("a cancelled episode stops its running command", async () => {
    const sandbox = new OsSandbox({}, { ...sandboxLimits(), commandTimeoutMs: 20_000 }, pool);
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("cancelled by test")), 300);
    const started = Date.now();
    await expect(sandbox.run("sleep 15", controller.signal)).rejects.toThrow("cancelled by test");
    expect(Date.now() - started).toBeLessThan(5_000);
    sandbox.close();
  });
});

function sandboxLimits() {
  return { ...DEFAULT_SANDBOX_LIMITS, commandTimeoutMs: 1000 };
}

describe("os agents", () => {
  it("the expert solves at least 99% of 200 test instances; the random baseline far fewer", async () => {
    const indices = Array.from({ length: 200 }, (_, i) => OS_SPLITS.test.start + i);
    expect((await scriptedStats(task, osExpert, indices)).successRate).toBeGreaterThanOrEqual(0.99);
    expect((await scriptedStats(task, osRandom, indices.slice(0, 100))).successRate).toBeLessThan(0.2);
  });

  it("exports the registered module with the 30 s cap", async () => {
    expect(taskModule.task.name).toBe("os");
    expect(taskModule.task.start).toBeTypeOf("function");
    const episode = await taskModule.task.start(0, new AbortController().signal);
    expect(episode.messages[0]?.content).toContain("stopped after 30 s");
    await episode.close?.();
  });
});
