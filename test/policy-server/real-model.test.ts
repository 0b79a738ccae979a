import { join } from "node:path";
import OpenAI from "openai";
import type { ChatCompletion } from "openai/resources/chat/completions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ChatCodec } from "../../shared/chat/index.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { createLogger } from "../../shared/log.ts";
import { saveCheckpoint } from "../../shared/model/checkpoint.ts";
import { createPolicy, initBackend, type TransformerPolicy } from "../../shared/model/index.ts";
import type { ChatMessage, GenerationTrace, ToolSpec } from "../../shared/protocol/openai.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";
import { type RunningPolicyServer, servePolicy } from "../../trainer-image/policy-server/serve.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The server over the real TF.js transformer (wasm) and a real checkpoint store: what it reports
 * per token must be what the trainer recomputes, and it must pick up a newly published version.
 */
const tools: ToolSpec[] = [
  {
    type: "function",
    function: { name: "take_action", description: "Act", parameters: { type: "object", properties: {} } },
  },
];
const messages: ChatMessage[] = [{ role: "user", content: "Go to the kitchen." }];
const model = { vocabSize: 320, dModel: 32, layers: 2, heads: 4, kvHeads: 2, ffnHidden: 64, contextLength: 256 };
type ChoiceWithTrace = ChatCompletion.Choice & { agentrl: GenerationTrace };

describe("policy server on the TF.js model", () => {
  let dir: string;
  let store: LocalObjectStore;
  let codec: ChatCodec;
  let v0: TransformerPolicy;
  let server: RunningPolicyServer;

  beforeAll(async () => {
    await initBackend("wasm");
    dir = tempDir("policy-server-");
    store = new LocalObjectStore(join(dir, "checkpoints"));
    codec = ChatCodec.train([{ messages, tools }], model.vocabSize);
    v0 = createPolicy(model, 1);
    await saveCheckpoint(store, v0, { version: 0, step: 0, parent: null, tokenizerJson: codec.tokenizer.toText() });
    const config = parseConfig({
      transport: { localDir: dir },
      policy: { model, backend: "wasm", pollSeconds: 0.05, maxBatch: 8 },
      rollout: { maxTotalTokens: 256, maxTokensPerTurn: 64 },
    });
    server = await servePolicy({ config, pool: "current", port: 0, log: createLogger({ role: "test" }), store });
  });

  afterAll(async () => {
    await server?.close();
    v0?.dispose();
  });

  it("reports per-token log-probs that the training path reproduces (within 1e-4)", async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const temperature = 0.8;
    const completion = await client.chat.completions.create({
      model: "agentrl",
      messages: [...messages],
      tools: tools.map((t) => ({ type: "function" as const, function: t.function })),
      temperature,
      max_tokens: 24,
      n: 4,
      seed: 3,
    });
    expect(completion.choices).toHaveLength(4);
    for (const raw of completion.choices) {
      const { agentrl } = raw as ChoiceWithTrace;
      const prompt = agentrl.prompt_token_ids ?? [];
      expect(prompt).toEqual(codec.promptTokens(messages, tools));
      expect(agentrl.policy_versions.every((v) => v === 0)).toBe(true);
      const [recomputed] = v0.logProbs([Int32Array.from([...prompt, ...agentrl.token_ids])], temperature);
      const generated = Array.from(recomputed ?? []).slice(prompt.length);
      expect(generated).toHaveLength(agentrl.logprobs.length);
      generated.forEach((lp, t) => {
        expect(Math.abs(lp - (agentrl.logprobs[t] as number))).toBeLessThan(1e-4);
      });
    }
  });

  it("follows the store: a newly published version is served without a restart", async () => {
    const v1 = createPolicy(model, 2, { version: 1 });
    await saveCheckpoint(store, v1, { version: 1, step: 1, parent: 0, tokenizerJson: codec.tokenizer.toText() });
    v1.dispose();
    const deadline = Date.now() + 20_000;
    while (server.version() !== 1 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(server.version()).toBe(1);
    const response = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages, max_tokens: 4, temperature: 1 }),
    });
    const choice = ((await response.json()) as { choices: ChoiceWithTrace[] }).choices[0];
    expect(choice?.agentrl.policy_versions.every((v) => v === 1)).toBe(true);
  });
});
