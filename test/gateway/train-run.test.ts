import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { BASE_CHECKPOINT_DIR, runPipeline } from "../../cli/launch/pipeline.ts";
import { readMetrics } from "../../cli/report/report.ts";
import { runCalculatorAgent } from "../../examples/byo-agent/calculator-agent.ts";
import { endSession, openSession, rewardSession } from "../../examples/byo-agent/sessions.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { freePort } from "../../shared/net.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { readLedger } from "../../trainer-image/trainer/ledger.ts";
import { waitFor } from "../env/helpers.ts";
import { storedTrajectories } from "../support/pipelineRun.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * `gateway.port` in an experiment config, as the README's "Bring your own agent" shows it: the run
 * (runPipeline, what `agentrl train` and `npm start` call) starts the gateway beside its policy
 * servers, writes the admin key into the run folder, and trains on what an agent's sessions record.
 * With `gateway.exclusive` no feeder or rollout worker runs, so every trained trajectory is the agent's.
 */
describe("a training run with gateway.port set", () => {
  it("starts the gateway, takes an agent's sessions, and trains a step on them alone", async () => {
    const saved = process.env.AGENTRL_GATEWAY_ADMIN_KEY;
    delete process.env.AGENTRL_GATEWAY_ADMIN_KEY; // the run generates one and writes it to its folder
    const port = await freePort();
    const runDir = tempDir("agentrl-gateway-run-");
    const config = parseConfig({
      experimentId: "gateway-run",
      tasks: { mix: [{ name: "example" }] },
      rollout: { groupSize: 2, maxTokensPerTurn: 12, crossPolicy: { enabled: false } },
      trainer: { batchSize: 1, maxSteps: 1, warmupFactor: 1 },
      evaluation: { instances: 0 },
      gateway: { port, exclusive: true },
    });
    const run = runPipeline({ config, runDir, baseCheckpoint: BASE_CHECKPOINT_DIR });
    try {
      const gatewayUrl = `http://127.0.0.1:${port}`;
      const keyFile = join(runDir, "gateway-admin.key");
      let ended = false;
      const markEnded = () => {
        ended = true;
      };
      run.then(markEnded, markEnded);
      const gatewayUp = async () =>
        existsSync(keyFile) && (await fetch(`${gatewayUrl}/health`).catch(() => undefined))?.ok === true;
      await waitFor(async () => ended || (await gatewayUp()), 180_000, "the run's gateway", 200);
      expect(ended).toBe(false); // the run must still be waiting for the agent's sessions
      const adminKey = readFileSync(keyFile, "utf8").trim();

      // One GRPO group of two calculator agents with different rewards, so the step has a signal.
      const sessions = await Promise.all(
        [0, 1].map(() => openSession(gatewayUrl, adminKey, { task: "calculator", groupId: "calc-0", groupSize: 2 })),
      );
      const states = await Promise.all(
        sessions.map(async (session, i) => {
          const agent = await runCalculatorAgent(session.baseUrl, session.apiKey, [2, 3 + i], 2);
          expect(agent.calls).toBeGreaterThan(0);
          await rewardSession(gatewayUrl, session, i);
          return endSession(gatewayUrl, session);
        }),
      );
      for (const state of states) expect(state).toMatchObject({ driftCalls: 0 });

      const result = await run;
      expect(result.interrupted).toBe(false);
      expect(result.steps).toBe(1);
      expect((await readMetrics(join(runDir, "metrics.jsonl"))).map((r) => r.version)).toEqual([1]);

      const runConfig = parseConfig(JSON.parse(readFileSync(join(runDir, "config.json"), "utf8")));
      const transport = await createTransport(runConfig.transport);
      try {
        const consumed = (await readLedger(transport.store("checkpoints"), 1))?.consumed ?? [];
        expect(consumed.length).toBeGreaterThanOrEqual(2);
        const stored = await storedTrajectories(transport.store("trajectories"));
        for (const id of consumed) expect(stored.get(id)?.task).toBe("calculator");
      } finally {
        await transport.close();
      }
    } finally {
      if (saved !== undefined) process.env.AGENTRL_GATEWAY_ADMIN_KEY = saved;
      await run.catch(() => {});
    }
  }, 420_000);
});
