import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import type { Evaluation, Script } from "../../env-images/osbench/instances.ts";
import { loadOs } from "../../env-images/osbench/instances.ts";
import { OS_SYSTEM_PROMPT, osUserPrompt } from "../../env-images/osbench/prompts.ts";
import {
  bashObservation,
  cleanShellOutput,
  independentArgv,
  judge,
  judgeChecks,
  judgeMatch,
  pyStrip,
  type RunIndependent,
} from "../../env-images/osbench/scorer.ts";
import { SYNC_TIMEOUT_MS } from "../support/cli.ts";
import { agentBenchDataDir } from "./support.ts";

/**
 * OS interaction scoring as upstream's task.py scores: cases derived from its code and, with the
 * published data, from its own check scripts run with upstream's command lines on this machine's
 * bash and python3 (no container: these scripts compare their arguments only).
 */
const enc = (text: string) => new TextEncoder().encode(text);

/** Runs a script here, as the container would (argv from independentArgv). */
const runHere: RunIndependent = async (script, params) => {
  const [bin, ...args] = independentArgv(script, params);
  const result = spawnSync(bin!, args, { encoding: "buffer", timeout: SYNC_TIMEOUT_MS });
  return { exitCode: result.status ?? -1, stdout: new Uint8Array(result.stdout) };
};

describe("observations", () => {
  it("frames output, and says when it is empty", () => {
    expect(bashObservation(enc("hi\n"))).toBe("The output of the OS:\n\nhi\n");
    expect(bashObservation(enc(""))).toBe("The output of the OS is empty.");
  });

  it("cuts at more than 800 characters (code points) to 780 plus a note", () => {
    expect(bashObservation(enc("x".repeat(800)))).toBe(`The output of the OS:\n\n${"x".repeat(800)}`);
    const cut = bashObservation(enc("é".repeat(801)));
    expect(cut).toBe(`The output of the OS:\n\n${"é".repeat(780)}\n[truncated because the output is too long]`);
  });

  it("non-UTF-8 output is reported as upstream reports it", () => {
    expect(bashObservation(new Uint8Array([0xff, 0xfe, 0x41]))).toBe(
      "The output of the OS:\n\nOS Environment output cannot be decoded as UTF-8",
    );
  });

  it("removes colour codes, bracketed-paste toggles and BEL", () => {
    expect(cleanShellOutput("\x1b[01;34mdir\x1b[0m\x07 \x1b[?2004hx")).toBe("dir x");
  });
});

describe("match", () => {
  const match: Evaluation = { kind: "match", answer: "42", strip: true };
  it("is exact after Python's strip", () => {
    expect(judgeMatch(" 42\n", match)).toBe(true);
    expect(judgeMatch("42.0", match)).toBe(false);
    expect(judgeMatch("The answer is 42", match)).toBe(false);
    expect(judgeMatch(null, match)).toBe(false);
    expect(pyStrip("\x1c 7\u3000")).toBe("7");
  });
  it("without strip compares the raw text", () => {
    expect(judgeMatch(" 42", { kind: "match", answer: "42", strip: false })).toBe(false);
  });
});

describe("checks", () => {
  const echo = (code: string): Script => ({ language: "bash", code });

  it("each check gets [answer, stdout of the earlier checks...]; a null entry runs the example", async () => {
    const seen: string[][] = [];
    const run: RunIndependent = async (script, params) => {
      seen.push([...params]);
      return { exitCode: 0, stdout: enc(script.code === "example" ? "5\n" : `out${seen.length}`) };
    };
    const verdict = await judgeChecks(
      "5",
      { kind: "check", checks: [null, echo("first"), echo("second")], example: echo("example") },
      run,
    );
    expect(verdict).toEqual({ success: true });
    expect(seen).toEqual([["5"], ["5", "5\n"], ["5", "5\n", "out2"]]);
  });

  it("the first non-zero exit fails, and later checks do not run", async () => {
    let calls = 0;
    const run: RunIndependent = async () => ({ exitCode: ++calls === 1 ? 1 : 0, stdout: enc("") });
    const verdict = await judgeChecks("x", { kind: "check", checks: [echo("a"), echo("b")] }, run);
    expect(verdict).toMatchObject({ success: false, failedAt: 0 });
    expect(calls).toBe(1);
  });

  it("a missing answer reaches the checks as Python's str(None)", async () => {
    const verdict = await judgeChecks(null, { kind: "check", checks: [echo('[ "$1" = None ]')] }, runHere);
    expect(verdict.success).toBe(true);
  });

  it("bash checks see the parameters as $1, $2 (upstream's `bash -c code -- p...`)", async () => {
    expect(independentArgv(echo("x"), ["a", "b"])).toEqual(["bash", "-c", "x", "--", "a", "b"]);
    expect(independentArgv(echo("x"), [])).toEqual(["bash", "-c", "x"]);
    expect(independentArgv({ language: "python", code: "y" }, ["a"])).toEqual(["python3", "-c", "y", "a"]);
    const verdict = await judge(
      "7",
      { kind: "check", checks: [null, echo('[ "$1" = "$2" ]')], example: echo("printf 7") },
      runHere,
    );
    expect(verdict.success).toBe(true);
  });
});

describe.skipIf(!agentBenchDataDir())("upstream's own check scripts (scripts/7/check)", () => {
  const checkNamed = (suffix: string): Script => {
    for (const instance of loadOs("os-std"))
      if (instance.evaluation.kind === "check")
        for (const check of instance.evaluation.checks)
          if (check && check.language === "python" && check.code.includes(suffix)) return check;
    throw new Error(`no std check containing ${suffix}`);
  };
  const example = (stdout: string): Script => ({ language: "bash", code: `printf '%s' '${stdout}'` });
  const verdict = (answer: string | null, check: Script, expected: string) =>
    judge(answer, { kind: "check", checks: [null, check], example: example(expected) }, runHere);

  it("integer-match: int() on both sides, so whitespace and sign forms agree and words do not", async () => {
    const integer = checkNamed("if int(argv[1]) == int(argv[2])");
    expect((await verdict("12", integer, "12\n")).success).toBe(true);
    expect((await verdict(" +12 ", integer, "12")).success).toBe(true);
    expect((await verdict("13", integer, "12")).success).toBe(false);
    expect((await verdict("twelve", integer, "12")).success).toBe(false);
    expect((await verdict(null, integer, "12")).success).toBe(false);
  });

  it("string-match: equal after normalising newlines and stripping", async () => {
    const string = checkNamed("if norm_newline(argv[1]).strip() == norm_newline(argv[2]).strip()");
    expect((await verdict("a\r\nb", string, "a\nb\n")).success).toBe(true);
    expect((await verdict("a b", string, "a\nb")).success).toBe(false);
  });

  it("the system prompt and first message are upstream's", () => {
    expect(OS_SYSTEM_PROMPT.split("\n")).toHaveLength(9);
    expect(osUserPrompt("Q?")).toBe("Now, I will start a new problem in a new OS. My problem is:\n\nQ?");
  });
});
