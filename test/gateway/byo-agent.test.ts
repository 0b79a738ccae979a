import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCalculatorAgent } from "../../examples/byo-agent/calculator-agent.ts";
import { endSession, openSession, rewardSession } from "../../examples/byo-agent/sessions.ts";
import { runGroup } from "../../examples/byo-agent/train.ts";
import { createGateway } from "../../functions/gateway/index.ts";
import { newestCodec } from "../../shared/chat/checkpoint.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { listen, type RunningServer } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { initBackend } from "../../shared/model/backend.ts";
import { saveCheckpoint } from "../../shared/model/checkpoint.ts";
import { createPolicy } from "../../shared/model/transformer.ts";
import { PolicyClient } from "../../shared/policy/client.ts";
import { PolicyPool } from "../../shared/policy/pool.ts";
import { listVersions } from "../../shared/protocol/checkpoints.ts";
import { type StepMetrics, Trajectory } from "../../shared/protocol/index.ts";
import { ChatCompletionRequest, ChatCompletionResponse, type GenerationTrace } from "../../shared/protocol/openai.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { servePolicy } from "../../trainer-image/policy-server/serve.ts";
import { readLedger } from "../../trainer-image/trainer/ledger.ts";
import { runTrainer, type TrainerSummary } from "../../trainer-image/trainer/trainer.ts";
import { startStack } from "../env/helpers.ts";
import { exampleCodec } from "../roles/rolloutHelpers.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The acceptance: an agent written only against the `openai` package, with its own loop
 * and its own calls to the env API, trains the policy through the gateway: a real policy server
 * (tiny model), a real trainer, the local transport.
 */

const ADMIN = "byo-agent-admin-key-0123456789";
const MODEL = { vocabSize: 512, dModel: 16, layers: 1, heads: 2, kvHeads: 1, ffnHidden: 32, contextLength: 1024 };

describe("examples/byo-agent trains through the gateway", () => {
  let transport: Transport;
  const closers: Array<() => Promise<void>> = [];
  /** What the policy server answered, by the prompt ids the gateway sent (group members share first prompts). */
  const served = new Map<string, GenerationTrace[]>();
  /** The policy server's answer to `prompt` that generated `ids`, if it gave one. */
  const answerOf = (prompt: readonly number[] | undefined, ids: readonly number[] | undefined) =>
    served.get(JSON.stringify(prompt))?.find((trace) => JSON.stringify(trace.token_ids) === JSON.stringify(ids));
  let gatewayUrl = "";
  let controllerUrl = "";
  const config = parseConfig({
    experimentId: "byo",
    policy: { backend: "cpu", model: MODEL, pollSeconds: 0.2 },
    rollout: { groupSize: 2, maxTotalTokens: 1024, maxTokensPerTurn: 12, crossPolicy: { enabled: false } },
    trainer: { batchSize: 2, warmupFactor: 1, maxSteps: 3, learningRate: 1e-2 },
    transport: { localDir: tempDir("byo-"), visibilityTimeoutSeconds: 10 },
    gateway: { baselineGroupSize: 2 },
  });

  beforeAll(async () => {
    transport = await createTransport(config.transport);
    const codec = await exampleCodec();
    await initBackend("cpu");
    const base = createPolicy(MODEL, 7, { version: 0 });
    await saveCheckpoint(transport.store("checkpoints"), base, {
      version: 0,
      step: 0,
      parent: null,
      tokenizerJson: JSON.stringify(codec.tokenizerJson()),
    });
    base.dispose();
    const log = createLogger({ role: "byo-test" });
    const policy = await servePolicy({
      config,
      pool: "current",
      port: 0,
      log,
      store: transport.store("checkpoints"),
      decodeThread: "main",
    });
    closers.push(() => policy.close());
    const stack = await startStack([{ concurrency: 16 }]);
    closers.push(() => stack.close());
    controllerUrl = stack.controller.url;
    // the policy server's own answers, seen on the wire between gateway and policy
    const recording: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      const request = ChatCompletionRequest.parse(JSON.parse(String(init?.body)));
      const answer = ChatCompletionResponse.parse(await response.clone().json());
      const trace = answer.choices[0]?.agentrl;
      const key = JSON.stringify(request.agentrl?.prompt_token_ids);
      if (trace) served.set(key, [...(served.get(key) ?? []), trace]);
      return response;
    };
    let http: RunningServer | undefined;
    const gateway = createGateway({
      config,
      transport,
      codec: await newestCodec(transport.store("checkpoints")),
      pool: new PolicyPool(config.rollout, { current: `${policy.url}/v1` }),
      policy: new PolicyClient(60_000, recording),
      adminKey: ADMIN,
      publicUrl: () => http?.url ?? "",
      log,
    });
    http = await listen(gateway.app);
    closers.push(() => (http as RunningServer).close());
    gatewayUrl = http.url;
  }, 120_000);
  afterAll(async () => {
    for (const close of closers.reverse()) await close();
    await transport?.close();
  });

  it("3 trainer steps: stored trajectories are token for token the policy server's, rewards reach the trainer, versions are published; a history-keeping agent merges with zero drift", async () => {
    const lines: StepMetrics[] = [];
    const trainer: Promise<TrainerSummary> = runTrainer(config, transport, {
      waitSeconds: 0,
      metrics: (line) => {
        lines.push(line);
      },
    });
    let done = false;
    void trainer.finally(() => {
      done = true;
    });
    const posted = new Map<string, number>();
    const states: Array<Record<string, unknown>> = [];
    // the operator's loop: GRPO groups of the env agent, and the calculator agent in between
    for (let g = 0; !done && g < 40; g++) {
      const results = await runGroup({
        gatewayUrl,
        adminKey: ADMIN,
        controllerUrl,
        task: "example",
        index: g,
        groupId: `byo-g${g}`,
        groupSize: 2,
        returnTokenIds: true,
        // a 464-token first prompt + 4 turns of at most 12 generated tokens and an observation stay within rollout.maxTotalTokens
        maxTurns: 4,
        // the environment's reward, shaped by length so groups differ (an untrained model rarely solves it)
        rewardOf: (run) => run.reward + 0.05 * run.completions.length,
      });
      for (const r of results) {
        posted.set(r.session.sessionId, r.run.reward + 0.05 * r.run.completions.length);
        states.push(r.state);
        // what the agent got back is what the policy server generated for that prompt
        for (const c of r.run.completions) expect(answerOf(c.promptTokenIds, c.tokenIds)).toBeDefined();
      }
      const calc = await openSession(gatewayUrl, ADMIN, { task: "calculator" });
      const run = await runCalculatorAgent(calc.baseUrl, calc.apiKey, [g, 2 * g, 3], 3);
      await rewardSession(gatewayUrl, calc, run.reward + 0.1 * (g % 3));
      posted.set(calc.sessionId, run.reward + 0.1 * (g % 3));
      states.push({ ...(await endSession(gatewayUrl, calc)), agentCalls: run.calls });
    }
    const summary = await trainer;
    expect(summary.version).toBe(3);
    expect(await listVersions(transport.store("checkpoints"))).toEqual([3, 2, 1, 0]);
    expect(lines).toHaveLength(3);

    // both agents, unchanged, re-send their history: every call after the first merged, no drift
    for (const state of states) {
      expect(state.driftCalls).toBe(0);
      expect(state.mergedCalls).toBe((state.calls as number) - 1);
    }
    expect(states.some((s) => s.task === "calculator" && (s.calls as number) >= 2)).toBe(true);

    // every trajectory the trainer consumed: trained tokens are the policy server's, call by call
    const ledger = await readLedger(transport.store("checkpoints"), 3);
    const consumed = ledger?.consumed ?? [];
    expect(consumed.length).toBeGreaterThanOrEqual(4 * 3);
    const keys = await transport.store("trajectories").list("trajectories/byo/");
    let rewardSum = 0;
    for (const id of consumed) {
      const key = keys.find((k) => k.key.endsWith(`/${id}.json`))?.key as string;
      const t = Trajectory.parse(JSON.parse((await transport.store("trajectories").getText(key)) as string));
      expect(key).toBe(`trajectories/byo/${t.groupId}/${id}.json`);
      const sessionId = id.replace(/-seg\d+$/, "");
      expect(t.reward).toBe(posted.get(sessionId));
      rewardSum += t.reward;
      let trained = 0;
      for (const call of t.gatewayCalls ?? []) {
        const trace = answerOf(t.tokenIds.slice(0, call.promptEnd), t.tokenIds.slice(call.promptEnd, call.end));
        expect(trace, `${id}: the policy server never generated the tokens of ${call.completionId}`).toBeDefined();
        expect(t.logprobs.slice(call.promptEnd, call.end)).toEqual(trace?.sampled_logprobs);
        expect(t.policyVersion.slice(call.promptEnd, call.end)).toEqual(trace?.policy_versions);
        expect(t.lossMask.slice(call.promptEnd, call.end).every((m) => m === 1)).toBe(true);
        trained += call.end - call.promptEnd;
      }
      expect(t.lossMask.reduce<number>((s, m) => s + m, 0)).toBe(trained);
    }
    // the rewards the operator posted are what the trainer's metrics report
    const reported = lines.reduce(
      (sum, line) =>
        sum +
        ["example", "calculator"].reduce(
          (s, task) =>
            s + (line.metrics[`task/${task}/reward`] ?? 0) * (line.metrics[`task/${task}/trajectories`] ?? 0),
          0,
        ),
      0,
    );
    expect(reported).toBeCloseTo(rewardSum, 6);
    expect(lines.at(-1)?.metrics["gateway/trajectories"]).toBeGreaterThan(0);
  }, 600_000);
});
