import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { callTool, lastObservation, turnsSoFar } from "../common/agent.ts";
import { hashString, Rng } from "../common/rng.ts";
import { loadOs, type OsSplit, type Script } from "./instances.ts";

/** A script as one bash_action: bash as it is, python through `python3 -c`. */
function asBash(script: Script): string {
  return script.language === "bash" ? script.code : `python3 -c '${script.code.replaceAll("'", "'\\''")}'`;
}

/** What a bash_action printed, read back from its observation (empty when it printed nothing). */
export function printedOf(observation: string): string {
  const prefix = "The output of the OS:\n\n";
  return observation.startsWith(prefix) ? observation.slice(prefix.length) : "";
}

/**
 * The expert plays upstream's own solution. A match instance answers its literal. A check instance
 * runs its example in the shell, then answers what the example printed, trimmed (checks that compare
 * against the example get its output; checks of the system's state ignore the answer). What it
 * misses shows where these containers differ from upstream's.
 */
export function osExpert(task: OsSplit): ScriptedAgent {
  return {
    name: `${task}-expert`,
    act(messages: readonly ChatMessage[], index: number): AssistantMessage {
      const instance = loadOs(task)[index]!;
      const turn = turnsSoFar(messages);
      const evaluation = instance.evaluation;
      if (evaluation.kind === "match") return callTool("answer_action", { answer: evaluation.answer }, turn);
      if (evaluation.kind === "regex" || !evaluation.example)
        return callTool("finish_action", { thought: "No example to follow." }, turn);
      if (turn === 0)
        return callTool("bash_action", { script: asBash(evaluation.example) }, turn, "I run the reference solution.");
      // A model answers the value, not the line it was printed on: the trailing newline would
      // reach example scripts that take the answer as an argument (os-std 140 greps for it).
      return callTool("answer_action", { answer: printedOf(lastObservation(messages)).trim() }, turn);
    },
  };
}

/** The random baseline: generic look-around commands, then an answer taken from what it saw. */
export function osRandom(task: OsSplit): ScriptedAgent {
  return {
    name: `${task}-random`,
    act(messages: readonly ChatMessage[], index: number): AssistantMessage {
      const turn = turnsSoFar(messages);
      const rng = new Rng(hashString(`${task}-random:${index}:${turn}`));
      if (turn > 0 && rng.chance(0.35)) {
        const words = printedOf(lastObservation(messages)).split(/\s+/).filter(Boolean);
        return callTool("answer_action", { answer: words.length > 0 ? rng.pick(words) : "0" }, turn);
      }
      const commands = ["ls -la", "pwd", "ls /", "cat /etc/os-release", "ls ~ | wc -l", "whoami", "df -h | head -3"];
      return callTool("bash_action", { script: rng.pick(commands) }, turn);
    },
  };
}
