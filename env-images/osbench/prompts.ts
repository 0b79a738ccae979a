import { z } from "zod";
import type { ToolDefinition } from "../../shared/env/task.ts";

/**
 * What the agent reads in AgentBench FC's OS interaction (Apache-2.0, THUDM/AgentBench), verbatim:
 * models are compared on these words.
 */

export const OS_MAX_ROUNDS = 8;

export const OS_SYSTEM_PROMPT = `You are an assistant that will act like a person. I will play the role of a Linux (Ubuntu) operating system.
Your goal is to implement the operations required by me or answer the questions proposed by me.
For each of your turns, you should first think about what you should do, and then call exactly one of the provided tools according to the situation.
If you think the output is too long, I will truncate it. The truncated output is not complete. You have to deal with the truncating problem by yourself.
Attention, your bash code should not contain any input operation. Once again, you should use one tool in each turn, and should not respond without function calling.
Note that if you think the task has been finished, or there is some message missing to completely complete the task, you should respond with calling the function "finish_action", as no additional information will be provided.
Also, note that if you have gotten the answer to the question, you should call the "answer_action" tool instead of simply writing your answer in your response.
Your answers should be exact and precise (for example, a single number), do not answer with full sentences or phrases.
Always use a tool provided instead of simply responding with content.`;

/** The opening user message, as upstream builds it from the instance's description. */
export function osUserPrompt(description: string): string {
  return `Now, I will start a new problem in a new OS. My problem is:\n\n${description}`;
}

/** Upstream's replies to an agent's mistakes (the turn counts; the episode goes on). */
export const OS_AGENT_ERRORS = {
  noToolCall: "No executable tool calls found. Please call a tool instead",
  unknownTool: "Invalid function call. Please call a tool instead",
  // Upstream answers unparsable arguments with Python's exception text; ours names the problem.
  badArguments: "Invalid function call arguments. Please call a tool instead",
} as const;

const MAX_SCRIPT_CHARS = 64_000;

export const BashActionArgs = z
  .object({ script: z.string().max(MAX_SCRIPT_CHARS).describe("The bash script to be executed.") })
  .strict();
export const FinishActionArgs = z
  .object({
    thought: z.string().max(MAX_SCRIPT_CHARS).describe("The thought or reason indicating the task is finished."),
  })
  .strict();
export const AnswerActionArgs = z
  .object({ answer: z.string().max(MAX_SCRIPT_CHARS).describe("The answer to the question.") })
  .strict();

export const OS_TOOLS: readonly ToolDefinition[] = [
  {
    name: "bash_action",
    description: "Execute bash code to perform an operation in the Linux environment.",
    parameters: BashActionArgs,
  },
  {
    name: "finish_action",
    description: "Indicate that the task has been finished or need some additional information to be finished.",
    parameters: FinishActionArgs,
  },
  { name: "answer_action", description: "Provide the answer to the question.", parameters: AnswerActionArgs },
];
