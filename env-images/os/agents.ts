import type { ScriptedAgent } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";
import { rngFor } from "../common/rng.ts";
import { generateOsInstance, OS_TASK_NAME } from "./generator.ts";

/**
 * Scripted os agents. Both act only through tool calls and read the tool observations: the expert
 * knows how instances are generated (so it knows which command solves one) but takes its answer
 * from the shell's output; the random agent pokes around and guesses.
 */

function toolCall(turn: number, name: string, args: Record<string, unknown>): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id: `call_${turn}`, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  };
}

function turnsSoFar(messages: readonly ChatMessage[]): number {
  return messages.filter((m) => m.role === "assistant").length;
}

/** The command output inside an os observation ("" when the output was empty). */
export function shellOutput(observation: string): string {
  const prefix = "The output of the OS:\n\n";
  return observation.startsWith(prefix) ? observation.slice(prefix.length).trim() : "";
}

/** The observation answering the latest bash_action call whose script is `script`, if any. */
function observationOf(messages: readonly ChatMessage[], script: string): string | undefined {
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role !== "assistant") continue;
    const call = message.tool_calls?.find(
      (c) => c.function.name === "bash_action" && scriptOf(c.function.arguments) === script,
    );
    if (!call) continue;
    const reply = messages.slice(i + 1).find((m) => m.role === "tool" && m.tool_call_id === call.id);
    return reply?.role === "tool" ? reply.content : undefined;
  }
  return undefined;
}

function scriptOf(argumentsJson: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(argumentsJson);
    return typeof parsed === "object" && parsed !== null && "script" in parsed && typeof parsed.script === "string"
      ? parsed.script
      : undefined;
  } catch {
    return undefined;
  }
}

/** Runs the instance's solution script, then answers with what the shell printed (or finishes). */
export const osExpert: ScriptedAgent = {
  name: "os-expert",
  act(messages, index) {
    const instance = generateOsInstance(index);
    const turn = turnsSoFar(messages);
    const observed = observationOf(messages, instance.solution);
    if (observed === undefined) return toolCall(turn, "bash_action", { script: instance.solution });
    if (instance.judge.kind === "match") return toolCall(turn, "answer_action", { answer: shellOutput(observed) });
    return toolCall(turn, "finish_action", { thought: "The requested change is done." });
  },
};

const GENERIC_COMMANDS = [
  "ls",
  "ls -la",
  "pwd",
  "ls /etc",
  "cat /etc/hostname",
  "find /home/user -type f",
  "ls /var/log",
  "wc -l /etc/passwd",
  "echo done > /home/user/out.txt",
];

/** Seeded random baseline: random commands on paths from the problem text, random answers. */
export const osRandom: ScriptedAgent = {
  name: "os-random",
  act(messages, index) {
    const turn = turnsSoFar(messages);
    const rng = rngFor(OS_TASK_NAME, index * 64 + turn, "random-agent");
    const problem = messages.find((m) => m.role === "user")?.content ?? "";
    const paths = problem.match(/\/[\w./-]*\w/g) ?? [];
    const last = [...messages].reverse().find((m) => m.role === "tool");
    const tokens = last?.role === "tool" ? shellOutput(last.content).split(/\s+/).filter(Boolean) : [];
    const roll = rng.next();
    if (roll < 0.55) {
      const path = paths.length > 0 ? rng.pick(paths) : "/home/user";
      const script = rng.chance(0.5)
        ? rng.pick(GENERIC_COMMANDS)
        : `${rng.pick(["cat", "ls", "wc -l", "head -n 3"])} ${path}`;
      return toolCall(turn, "bash_action", { script });
    }
    if (roll < 0.9) {
      const answer = tokens.length > 0 && rng.chance(0.5) ? rng.pick(tokens) : String(rng.int(0, 9));
      return toolCall(turn, "answer_action", { answer });
    }
    return toolCall(turn, "finish_action", { thought: "I think it is done." });
  },
};
