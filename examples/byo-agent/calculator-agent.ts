/**
 * A second agent, unchanged for training: a calculator with local tools (`add`, `answer`) and
 * its own loop. It keeps its chat history as the `openai` SDK hands messages back and re-sends
 * all of it on every call, the most common agent shape; through the gateway its calls merge
 * into one trajectory per conversation with no re-tokenization drift.
 */
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";

export const CALCULATOR_TOOLS: ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "add",
      description: "Adds two integers and returns the sum.",
      parameters: {
        type: "object",
        properties: { a: { type: "integer" }, b: { type: "integer" } },
        required: ["a", "b"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "answer",
      description: "Submits the final answer and ends the episode.",
      parameters: { type: "object", properties: { value: { type: "integer" } }, required: ["value"] },
    },
  },
];

export interface CalculatorRun {
  /** 1 for the right sum, 0 otherwise (the agent grades itself: its own reward). */
  readonly reward: number;
  readonly calls: number;
}

/** Asks the model for `numbers`' sum, running its tool calls locally, for at most `maxTurns` calls. */
export async function runCalculatorAgent(
  baseUrl: string,
  apiKey: string,
  numbers: readonly number[],
  maxTurns = 5,
): Promise<CalculatorRun> {
  const client = new OpenAI({ baseURL: baseUrl, apiKey, maxRetries: 2 });
  const history: ChatCompletionMessageParam[] = [
    { role: "system", content: "You solve arithmetic with the tools provided. Call exactly one tool per turn." },
    { role: "user", content: `What is ${numbers.join(" + ")}? Use add, then submit with answer.` },
  ];
  const target = numbers.reduce((a, b) => a + b, 0);
  for (let calls = 1; calls <= maxTurns; calls++) {
    const completion = await client.chat.completions.create({
      model: "agentrl",
      messages: history,
      tools: CALCULATOR_TOOLS,
    });
    const message = completion.choices[0]?.message;
    if (!message) break;
    history.push(message);
    const call = message.tool_calls?.[0];
    if (call?.type !== "function") {
      history.push({ role: "user", content: "Please call one of the tools." });
      continue;
    }
    let args: { a?: number; b?: number; value?: number } = {};
    try {
      args = JSON.parse(call.function.arguments) as typeof args;
    } catch {
      history.push({ role: "tool", tool_call_id: call.id, content: "error: arguments are not JSON" });
      continue;
    }
    if (call.function.name === "answer") return { reward: args.value === target ? 1 : 0, calls };
    const result =
      call.function.name === "add" ? String((args.a ?? 0) + (args.b ?? 0)) : `error: no tool ${call.function.name}`;
    history.push({ role: "tool", tool_call_id: call.id, content: result });
  }
  return { reward: 0, calls: maxTurns };
}
