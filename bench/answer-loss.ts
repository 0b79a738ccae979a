/**
 * Where the warm-up's imitation loss sits: on the db and os expert traces (fresh train-split
 * episodes, not the ones it was trained on), the mean loss per token on the answer value the
 * expert commits — a value its own query printed a turn earlier — against every other assistant
 * token. A high answer-value loss means the model has not learned to copy from observations,
 * which is what caps its success.
 *
 *   npm run bench:answer-loss [-- <checkpoint folder>]   (default: trainer-image/base-policy)
 */
import { loadTaskModule } from "../env-images/registry.ts";
import { ChatCodec } from "../shared/chat/index.ts";
import { loadCheckpoint } from "../shared/model/checkpoint.ts";
import { initBackend } from "../shared/model/index.ts";
import type { ChatMessage } from "../shared/protocol/openai.ts";
import { LocalObjectStore } from "../shared/transport/local.ts";
import { collectExpertTraces } from "../trainer-image/sft/sft.ts";

const EPISODES = 40;
const SEED = 99;
const folder = process.argv[2] ?? "trainer-image/base-policy";

/** The string value of the last assistant turn's tool-call argument (the committed answer). */
function committedValue(messages: readonly ChatMessage[]): string | undefined {
  const last = messages.filter((m) => m.role === "assistant").at(-1);
  const call = last && "tool_calls" in last ? last.tool_calls?.[0] : undefined;
  if (!call) return undefined;
  const value = Object.values(JSON.parse(call.function.arguments) as Record<string, unknown>)[0];
  return Array.isArray(value) ? String(value[0]) : String(value);
}

await initBackend("wasm");
const { policy, tokenizerJson } = await loadCheckpoint(new LocalObjectStore(folder), "newest");
const codec = ChatCodec.fromTokenizerJson(JSON.parse(tokenizerJson));
console.log(`${folder}: ${EPISODES} expert episodes per task (seed ${SEED}), loss per assistant token in nats`);
console.log("| task | answer-value tokens | their loss | share with p > 0.5 | other assistant tokens | their loss |");
console.log("|---|---|---|---|---|---|");
for (const name of ["db", "os"]) {
  const { traces } = await collectExpertTraces([await loadTaskModule(name)], EPISODES, SEED);
  const answer = { nll: 0, count: 0, confident: 0 };
  const rest = { nll: 0, count: 0 };
  for (const trace of traces) {
    const { tokens, lossMask } = codec.encodeConversation(trace.messages, trace.tools);
    const logp = policy.logProbs([Int32Array.from(tokens)], 1)[0] as Float32Array;
    const value = committedValue(trace.messages);
    const valueIds = value === undefined ? [] : codec.encode(value);
    // The value's last occurrence among the assistant tokens is the committed answer.
    let start = -1;
    for (let i = tokens.length - valueIds.length; valueIds.length > 0 && i >= 0 && start < 0; i--)
      if (lossMask[i] === 1 && valueIds.every((id, k) => tokens[i + k] === id)) start = i;
    for (let i = 0; i < tokens.length; i++) {
      if (lossMask[i] !== 1) continue;
      const nll = -(logp[i] as number);
      if (start >= 0 && i >= start && i < start + valueIds.length) {
        answer.nll += nll;
        answer.count += 1;
        if (nll < Math.log(2)) answer.confident += 1;
      } else {
        rest.nll += nll;
        rest.count += 1;
      }
    }
  }
  const mean = (s: { nll: number; count: number }) => (s.nll / Math.max(1, s.count)).toFixed(3);
  console.log(
    `| ${name} | ${answer.count} | ${mean(answer)} | ${(answer.confident / Math.max(1, answer.count)).toFixed(2)} | ${rest.count} | ${mean(rest)} |`,
  );
}
policy.dispose();
