import { exampleExpert, exampleTask } from "../../env-images/example/index.ts";
import { ChatCodec } from "../../shared/chat/index.ts";
import { runScripted, toolSpecs } from "../../shared/env/session.ts";
import { createApp, listen, type RunningServer } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { type AssistantMessage, ChatCompletionRequest, type ChatMessage } from "../../shared/protocol/openai.ts";

/** A tokenizer trained on a few expert episodes of the example task (fast, ~400 tokens). */
export async function exampleCodec(): Promise<ChatCodec> {
  const tools = toolSpecs(exampleTask);
  const runs = await Promise.all([0, 1, 2].map((i) => runScripted(exampleTask, i, exampleExpert)));
  return ChatCodec.train(
    runs.map((r) => ({ messages: r.messages, tools })),
    400,
  );
}

/** How the fake policy behaves. */
export interface FakePolicyBehaviour {
  /** Policy version reported for every token. */
  version: number;
  /** `expert` solves the example task; `chatty` answers without a tool call; `wrong` answers a wrong sum. */
  mode: "expert" | "chatty" | "wrong";
  /** Answer 503 to this many requests first. */
  failFirst: number;
  /** Delay before answering, ms. */
  delayMs: number;
  /** Leave the agentrl trace out (an external endpoint). */
  noTrace: boolean;
  /** Leave `sampled_logprobs` out of the trace (a server that reports only full log-probs). */
  noSampled: boolean;
}

export interface FakePolicy {
  readonly url: string;
  readonly behaviour: FakePolicyBehaviour;
  /** Requests received (validated), in order. */
  readonly requests: ChatCompletionRequest[];
  close(): Promise<void>;
}

/** The example task's turn as `mode` plays it: the expert adds x + y, then + z, then answers. */
export function expertTurn(
  messages: readonly ChatMessage[],
  mode: FakePolicyBehaviour["mode"] = "expert",
): AssistantMessage {
  const user = messages.find((m) => m.role === "user")?.content ?? "";
  const [x, y, z] = (user.match(/\d+/g) ?? ["0", "0", "0"]).map(Number) as [number, number, number];
  const turn = messages.filter((m) => m.role === "assistant").length;
  const last = messages[messages.length - 1];
  const partial = last?.role === "tool" ? Number(last.content) : 0;
  const call = (name: string, args: Record<string, unknown>): AssistantMessage => ({
    role: "assistant",
    content: null,
    tool_calls: [{ id: `call_${turn}`, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  });
  if (mode === "chatty") return { role: "assistant", content: "I think the answer is 7." };
  if (mode === "wrong") return call("answer", { value: x + y + z + 1 });
  if (turn === 0) return call("add", { a: x, b: y });
  if (turn === 1) return call("add", { a: partial, b: z });
  return call("answer", { value: partial });
}

/**
 * An OpenAI-compatible fake policy server (shared/http.ts) that plays the example task's expert
 * and reports an agentrl trace made with the real chat codec: the generated ids are the
 * canonical assistant tokens, log-prob -0.5 each (sampled log-prob -0.25, as if from a nucleus),
 * every token of `behaviour.version`.
 */
export async function startFakePolicy(
  codec: ChatCodec,
  behaviour: Partial<FakePolicyBehaviour> = {},
): Promise<FakePolicy> {
  const state: FakePolicyBehaviour = {
    version: 3,
    mode: "expert",
    failFirst: 0,
    delayMs: 0,
    noTrace: false,
    noSampled: false,
    ...behaviour,
  };
  const requests: ChatCompletionRequest[] = [];
  const app = createApp(createLogger({ role: "fake-policy" }));
  app.post("/v1/chat/completions", async (c) => {
    const body = ChatCompletionRequest.parse(await c.req.json());
    requests.push(body);
    if (state.delayMs > 0) await new Promise((r) => setTimeout(r, state.delayMs));
    if (state.failFirst > 0) {
      state.failFirst -= 1;
      return c.json({ error: "overloaded" }, 503);
    }
    const message = expertTurn(body.messages, state.mode);
    const ids = codec.assistantTokens(body.messages, message, body.tools);
    return c.json({
      id: `cmpl-${requests.length}`,
      object: "chat.completion",
      created: 0,
      model: body.model,
      choices: [
        {
          index: 0,
          message,
          finish_reason: message.tool_calls ? "tool_calls" : "stop",
          logprobs: null,
          ...(state.noTrace
            ? {}
            : {
                agentrl: {
                  token_ids: ids,
                  logprobs: ids.map(() => -0.5),
                  ...(state.noSampled ? {} : { sampled_logprobs: ids.map(() => -0.25) }),
                  policy_versions: ids.map(() => state.version),
                  prompt_token_ids: body.agentrl?.prompt_token_ids ?? codec.promptTokens(body.messages, body.tools),
                },
              }),
        },
      ],
      usage: { prompt_tokens: 0, completion_tokens: ids.length, total_tokens: ids.length },
    });
  });
  const server: RunningServer = await listen(app);
  return { url: `${server.url}/v1`, behaviour: state, requests, close: () => server.close() };
}
