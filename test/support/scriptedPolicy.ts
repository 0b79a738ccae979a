import type { ScriptedAgent } from "../../shared/env/task.ts";
import { createApp, listen, type RunningServer, readJson } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { ChatCompletionRequest, type ChatCompletionResponse } from "../../shared/protocol/openai.ts";

/** An OpenAI-compatible endpoint whose "model" is a scripted agent: no TF.js needed to test evaluation. */
export async function scriptedPolicyServer(agent: ScriptedAgent): Promise<{
  server: RunningServer;
  state: {
    requests: number;
    temperatures: Set<number | undefined>;
    topPs: Set<number | undefined>;
    seeds: Set<number | undefined>;
  };
}> {
  const app = createApp(createLogger({ role: "fake-policy" }));
  const state = {
    requests: 0,
    temperatures: new Set<number | undefined>(),
    topPs: new Set<number | undefined>(),
    seeds: new Set<number | undefined>(),
  };
  app.post("/v1/chat/completions", async (c) => {
    const request = await readJson(c, ChatCompletionRequest, "chat completion request");
    state.requests += 1;
    state.temperatures.add(request.temperature);
    state.topPs.add(request.top_p);
    state.seeds.add(request.seed);
    const message = await agent.act(request.messages, request.seed ?? 0);
    const response: ChatCompletionResponse = {
      id: `cmpl-${state.requests}`,
      object: "chat.completion",
      created: 0,
      model: request.model,
      choices: [{ index: 0, message, finish_reason: "tool_calls", logprobs: null }],
      usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
    };
    return c.json(response);
  });
  return { server: await listen(app), state };
}
