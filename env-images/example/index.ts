import { z } from "zod";
import type { Episode, ScriptedAgent, TaskDefinition, TaskModule } from "../../shared/env/task.ts";
import type { AssistantMessage, ChatMessage } from "../../shared/protocol/openai.ts";

/**
 * A small arithmetic task that exercises the env runtime end to end: instance `i` asks for the
 * sum of three seeded numbers. Tools: `add` (instant), `answer` (ends the episode, reward 1 when
 * right) and `wait` (a long-running call that stops only when its AbortSignal fires — what the
 * cancellation tests and `env check` rely on). Instant tools keep it usable for benchmarks.
 */

const Add = z.object({ a: z.number().int().describe("first addend"), b: z.number().int().describe("second addend") });
const Answer = z.object({ value: z.number().int().describe("the final sum") });
const Wait = z.object({ ms: z.number().int().min(0).max(600_000).describe("milliseconds to wait") });

/** Tool calls of `wait` currently running; tests read it to prove cancellation stopped the work. */
export const exampleActivity = { runningWaits: 0, abortedWaits: 0 };

/** The three numbers of instance `index` (deterministic; a tiny LCG keeps it reproducible). */
export function exampleNumbers(index: number): [number, number, number] {
  let state = (index * 2654435761 + 12345) >>> 0;
  const next = () => {
    state = (Math.imul(state, 1103515245) + 12345) >>> 0;
    return (state >>> 8) % 100;
  };
  return [next(), next(), next()];
}

function waitFor(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    exampleActivity.runningWaits += 1;
    const done = () => {
      exampleActivity.runningWaits -= 1;
      signal.removeEventListener("abort", onAbort);
    };
    const timer = setTimeout(() => {
      done();
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      done();
      exampleActivity.abortedWaits += 1;
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

export const exampleTask: TaskDefinition = {
  name: "example",
  tools: [
    { name: "add", description: "Adds two integers and returns the sum.", parameters: Add },
    { name: "answer", description: "Submits the final answer and ends the episode.", parameters: Answer },
    { name: "wait", description: "Waits for the given number of milliseconds.", parameters: Wait },
  ],
  maxTurns: 6,
  splits: { train: { start: 0, end: 1000 }, test: { start: 1000, end: 1100 } },
  async start(index: number): Promise<Episode> {
    const [x, y, z] = exampleNumbers(index);
    const target = x + y + z;
    return {
      messages: [
        { role: "system", content: "You solve arithmetic with the tools provided. Call exactly one tool per turn." },
        { role: "user", content: `What is ${x} + ${y} + ${z}? Use add, then submit with answer.` },
      ],
      async call(tool, args, signal) {
        if (tool === "add") {
          const { a, b } = Add.parse(args);
          return { observation: String(a + b) };
        }
        if (tool === "wait") {
          const { ms } = Wait.parse(args);
          await waitFor(ms, signal);
          return { observation: `waited ${ms} ms` };
        }
        const { value } = Answer.parse(args);
        const right = value === target;
        return {
          observation: right ? "Correct." : `Wrong: ${value}.`,
          reward: { reward: right ? 1 : 0, score: right ? 1 : 0, metrics: { correct: right ? 1 : 0 } },
          finish: "completed",
        };
      },
    };
  },
};

function toolCall(turn: number, name: string, args: Record<string, unknown>): AssistantMessage {
  return {
    role: "assistant",
    content: null,
    tool_calls: [{ id: `call_${turn}`, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  };
}

function lastToolResult(messages: readonly ChatMessage[]): string | undefined {
  const last = messages[messages.length - 1];
  return last?.role === "tool" ? last.content : undefined;
}

/** Adds the first two numbers, then the third, then answers: always right in three turns. */
export const exampleExpert: ScriptedAgent = {
  name: "example-expert",
  act(messages, index) {
    const [x, y, z] = exampleNumbers(index);
    const turn = messages.filter((m) => m.role === "assistant").length;
    if (turn === 0) return toolCall(turn, "add", { a: x, b: y });
    const partial = Number(lastToolResult(messages));
    if (turn === 1) return toolCall(turn, "add", { a: partial, b: z });
    return toolCall(turn, "answer", { value: partial });
  },
};

/** Answers a seeded random number in [0, 300): right about 1 time in 300. */
export const exampleRandom: ScriptedAgent = {
  name: "example-random",
  act(messages, index) {
    const turn = messages.filter((m) => m.role === "assistant").length;
    const [guess] = exampleNumbers(index * 7 + 3);
    return toolCall(turn, "answer", { value: (guess * 3 + turn) % 300 });
  },
};

export const taskModule: TaskModule = { task: exampleTask, expert: exampleExpert, random: exampleRandom };
