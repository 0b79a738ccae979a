import type { Evaluation, Script } from "./instances.ts";

/**
 * AgentBench FC's OS interaction scoring and observations (upstream `task.py`: `execute`,
 * `execute_independent`, `_execute_bash_command`, `_evaluate_answer`), as pure functions: the
 * container work is passed in, so the rules are testable without one.
 */

/** Upstream cuts observations longer than this many characters (code points, as Python counts). */
export const OUTPUT_LIMIT = 800;
const TRUNCATED_TO = 780;

/** Terminal control sequences upstream removes from shell output, in its order (ESC = \x1b, BEL = \x07). */
const ESC = String.fromCharCode(0x1b);
const BEL = String.fromCharCode(0x07);
const CONTROL_SEQUENCES: readonly RegExp[] = [
  // A shell prompt: ESC, then user@host, then '#' or '$' (or '|') and a space.
  new RegExp(`${ESC}.+@.+[#|$] `, "g"),
  new RegExp(`${ESC}\\[[0-9;]*[a-zA-Z]`, "g"),
  new RegExp(`${ESC}\\][0-9]*;[^${BEL}]*${BEL}`, "g"),
  new RegExp(`${ESC}\\[\\?2004[hl]`, "g"),
  new RegExp(BEL, "g"),
];

/** Shell output with upstream's control sequences removed (colours from `ls`, `grep`, ...). */
export function cleanShellOutput(text: string): string {
  return CONTROL_SEQUENCES.reduce((out, pattern) => out.replace(pattern, ""), text);
}

/** Decodes bytes as Python's strict `.decode("utf-8")` does: undefined when they are not UTF-8. */
export function decodeUtf8(bytes: Uint8Array): string | undefined {
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return undefined;
  }
}

/** The tool message a bash_action gets: decoded, truncated at 800 characters to 780, framed as upstream frames it. */
export function bashObservation(output: Uint8Array): string {
  const decoded = decodeUtf8(output);
  let text = decoded === undefined ? "OS Environment output cannot be decoded as UTF-8" : cleanShellOutput(decoded);
  const chars = Array.from(text);
  if (chars.length > OUTPUT_LIMIT)
    text = `${chars.slice(0, TRUNCATED_TO).join("")}\n[truncated because the output is too long]`;
  return text ? `The output of the OS:\n\n${text}` : "The output of the OS is empty.";
}

// Python's str.strip() removes these (str.isspace), which differs from JS trim (\x1c-\x1f, \x85; not \ufeff).
const PY_SPACE = "[\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
const PY_STRIP = new RegExp(`^${PY_SPACE}+|${PY_SPACE}+$`, "gu");

export function pyStrip(text: string): string {
  return text.replace(PY_STRIP, "");
}

/**
 * What the agent committed: answer_action's answer, or finish_action's thought (upstream passes
 * the first argument of either on). `null` when nothing was given.
 */
export type Committed = string | null;

/** `match` and `regex` instances: exact equality (after strip, for string matches) or a regex search. */
export function judgeMatch(answer: Committed, evaluation: Evaluation): boolean {
  if (evaluation.kind === "match") {
    const given = answer !== null && evaluation.strip ? pyStrip(answer) : answer;
    return given === evaluation.answer;
  }
  if (evaluation.kind === "regex") return answer !== null && new RegExp(evaluation.regex).test(answer);
  return false;
}

/** How a script runs in the container: the command line upstream's `execute_independent` builds. */
export function independentArgv(script: Script, params: readonly string[]): string[] {
  if (script.language === "python") return ["python3", "-c", script.code, ...params];
  // `bash -c code -- p1 p2`: bash takes "--" as $0, so the parameters are $1, $2, ... as upstream has them.
  return ["bash", "-c", script.code, ...(params.length > 0 ? ["--", ...params] : [])];
}

/** Runs a script in the episode's container, separately from the agent's shell. */
export type RunIndependent = (
  script: Script,
  params: readonly string[],
) => Promise<{ readonly exitCode: number; readonly stdout: Uint8Array }>;

/** Why a check instance failed, for the episode's record. */
export interface CheckVerdict {
  readonly success: boolean;
  /** The check that failed (0-based), when one did. */
  readonly failedAt?: number;
  readonly reason?: string;
}

/**
 * `check` instances: each script in order, with arguments [answer, stdout of every earlier check];
 * a `null` entry runs the instance's example now (after the agent acted) and its stdout is passed
 * on as the expected answer. The first non-zero exit fails the instance. Upstream passes `str(answer)`,
 * so a missing answer is the text "None".
 */
export async function judgeChecks(
  answer: Committed,
  evaluation: Evaluation,
  run: RunIndependent,
): Promise<CheckVerdict> {
  if (evaluation.kind !== "check") return { success: false, reason: "not a check instance" };
  const params = [answer ?? "None"];
  for (const [i, entry] of evaluation.checks.entries()) {
    const script = entry ?? evaluation.example;
    if (!script) return { success: false, failedAt: i, reason: "a null check needs the instance's example" };
    const { exitCode, stdout } = await run(script, params);
    if (exitCode !== 0) return { success: false, failedAt: i, reason: `check ${i} exited ${exitCode}` };
    // Upstream decodes strictly; output that is not UTF-8 ends the evaluation as a task error.
    const text = decodeUtf8(stdout);
    if (text === undefined) return { success: false, failedAt: i, reason: `check ${i} printed non-UTF-8 output` };
    params.push(text);
  }
  return { success: true };
}

/** The whole judgement: match/regex instances by comparison, check instances by their scripts. */
export function judge(answer: Committed, evaluation: Evaluation, run: RunIndependent): Promise<CheckVerdict> {
  if (evaluation.kind === "check") return judgeChecks(answer, evaluation, run);
  const success = judgeMatch(answer, evaluation);
  return Promise.resolve(success ? { success } : { success, reason: "answer does not match" });
}
