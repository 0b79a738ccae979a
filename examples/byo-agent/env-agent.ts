/**
 * An agent of its own: its own loop, its own tools, written only against the official `openai`
 * package. It solves one of agentrl's tasks by calling the environment API itself (the AgentRL
 * controller: start_sample, interact, cancel) and keeps its own chat history, re-sending all of
 * it on every call. Nothing here knows about training: pointed at a gateway session's baseUrl,
 * its calls become trajectories; pointed at any OpenAI-compatible server, it just runs.
 */
import OpenAI from "openai";
import type { ChatCompletionMessageParam, ChatCompletionTool } from "openai/resources/chat/completions";

export interface EnvAgentOptions {
  /** OpenAI base URL: a gateway session's `baseUrl`, or any OpenAI-compatible server. */
  readonly baseUrl: string;
  readonly apiKey: string;
  /** The environment controller, e.g. http://127.0.0.1:5020. */
  readonly controllerUrl: string;
  /** Bearer token of the controller's session API, when it has one (AGENTRL_CONTROLLER_SECRET). */
  readonly controllerToken?: string;
  readonly task: string;
  readonly index: number;
  /** Most model calls before the agent gives up. @default 8 */
  readonly maxTurns?: number;
  /** Ask for `prompt_token_ids` / `token_ids` (vLLM's extension; the gateway answers it). @default false */
  readonly returnTokenIds?: boolean;
}

/** One completion the agent received (ids only when it asked for them). */
export interface ReceivedCompletion {
  readonly id: string;
  readonly promptTokenIds?: number[];
  readonly tokenIds?: number[];
}

export interface EnvAgentRun {
  /** The environment's reward (0 when the episode did not complete). */
  readonly reward: number;
  readonly status: string;
  readonly completions: ReceivedCompletion[];
}

/** A completion with vLLM's token-id extension, which the SDK passes through untouched. */
type WithTokenIds = OpenAI.Chat.Completions.ChatCompletion & {
  prompt_token_ids?: number[];
  choices: Array<{ token_ids?: number[] }>;
};

interface EnvAnswer {
  messages: ChatCompletionMessageParam[];
  tools?: ChatCompletionTool[];
  finish: boolean;
  reward: number;
  status: string;
}

/** How long start_sample waits for a free env slot (HTTP 406) before giving up. */
const FREE_SLOT_WAIT_MS = 60_000;

async function envCall(
  options: EnvAgentOptions,
  path: string,
  body: unknown,
  session?: string,
): Promise<{ answer: EnvAnswer; session: string }> {
  // Every slot taken (406) is a wait, not a failure: another episode is about to end.
  for (let waited = 0; ; waited += 250) {
    try {
      return await envCallOnce(options, path, body, session);
    } catch (error) {
      if (!(error instanceof NoFreeSlot) || waited >= FREE_SLOT_WAIT_MS) throw error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
}

class NoFreeSlot extends Error {}

async function envCallOnce(
  options: EnvAgentOptions,
  path: string,
  body: unknown,
  session?: string,
): Promise<{ answer: EnvAnswer; session: string }> {
  const response = await fetch(`${options.controllerUrl.replace(/\/+$/, "")}/api/${path}`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(session ? { session_id: session } : {}),
      ...(options.controllerToken ? { authorization: `Bearer ${options.controllerToken}` } : {}),
    },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  if (response.status === 406) throw new NoFreeSlot(`env ${path}: HTTP 406: ${text.slice(0, 300)}`);
  if (!response.ok) throw new Error(`env ${path}: HTTP ${response.status}: ${text.slice(0, 300)}`);
  return { answer: JSON.parse(text) as EnvAnswer, session: response.headers.get("session_id") ?? session ?? "" };
}

/** Runs one episode of `task` instance `index`: model call, environment step, until the environment says it is done. */
export async function runEnvAgent(options: EnvAgentOptions): Promise<EnvAgentRun> {
  const client = new OpenAI({ baseURL: options.baseUrl, apiKey: options.apiKey, maxRetries: 2 });
  const started = await envCall(options, "start_sample", { name: options.task, index: options.index });
  const session = started.session;
  const history: ChatCompletionMessageParam[] = [...started.answer.messages];
  const tools = started.answer.tools ?? [];
  const completions: ReceivedCompletion[] = [];
  let finished = started.answer.finish;
  let reward = started.answer.reward;
  let status = started.answer.status;
  try {
    for (let turn = 0; turn < (options.maxTurns ?? 8) && !finished; turn++) {
      const completion = (await client.chat.completions.create({
        model: "agentrl",
        messages: history,
        tools,
        ...(options.returnTokenIds ? { return_token_ids: true } : {}),
      })) as WithTokenIds;
      const message = completion.choices[0]?.message;
      if (!message) throw new Error("the model answered no choice");
      completions.push({
        id: completion.id,
        ...(completion.prompt_token_ids ? { promptTokenIds: completion.prompt_token_ids } : {}),
        ...(completion.choices[0]?.token_ids ? { tokenIds: completion.choices[0].token_ids } : {}),
      });
      history.push(message); // the SDK's own message object, re-sent as it came
      const step = await envCall(
        options,
        "interact",
        { messages: [{ role: "assistant", content: message.content, tool_calls: message.tool_calls }] },
        session,
      );
      history.push(...step.answer.messages);
      finished = step.answer.finish;
      reward = step.answer.reward;
      status = step.answer.status;
    }
  } finally {
    if (!finished) await envCall(options, "cancel", {}, session).catch(() => undefined);
  }
  return {
    reward: finished && status === "completed" ? reward : 0,
    status: finished ? status : "turn limit",
    completions,
  };
}
