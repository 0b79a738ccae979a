import { describe, expect, it } from "vitest";
import { PolicyClient, type PolicyEndpoint, PolicyUnavailableError } from "../../shared/policy/client.ts";

const endpoint: PolicyEndpoint = { pool: "current", url: "http://policy.test/v1", model: "m", requiresTrace: true };
const request = {
  messages: [{ role: "user" as const, content: "hi" }],
  tools: [],
  temperature: 1,
  topP: 0.9,
  maxTokens: 4,
};

/** A fetch that answers every call with this chat-completions choice. */
function answering(choice: Record<string, unknown>): typeof fetch {
  return async () =>
    new Response(
      JSON.stringify({
        id: "c",
        object: "chat.completion",
        created: 0,
        model: "m",
        choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop", ...choice }],
        usage: { prompt_tokens: 1, completion_tokens: 2, total_tokens: 3 },
      }),
      { status: 200, headers: { "content-type": "application/json" } },
    );
}

describe("PolicyClient: a policy server's trace is checked before a token is recorded", () => {
  it("accepts a consistent trace with sampled log-probs", async () => {
    const trace = { token_ids: [5, 6], logprobs: [-1, -2], sampled_logprobs: [-0.5, -1], policy_versions: [3, 3] };
    const generation = await new PolicyClient(1_000, answering({ agentrl: trace })).generate(endpoint, request);
    expect(generation.trace?.sampled_logprobs).toEqual([-0.5, -1]);
  });

  it("refuses a trace whose arrays disagree in length, or a missing trace, as an infrastructure failure", async () => {
    const short = { token_ids: [5, 6], logprobs: [-1, -2], sampled_logprobs: [-0.5], policy_versions: [3, 3] };
    await expect(new PolicyClient(1_000, answering({ agentrl: short })).generate(endpoint, request)).rejects.toThrow(
      /trace lengths differ \(ids 2, logprobs 2, sampled_logprobs 1, versions 2\)/,
    );
    await expect(new PolicyClient(1_000, answering({})).generate(endpoint, request)).rejects.toBeInstanceOf(
      PolicyUnavailableError,
    );
  });
});
