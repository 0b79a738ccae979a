import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runFeeder } from "../../functions/feeder/feeder.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { listVersions } from "../../shared/protocol/checkpoints.ts";
import { RolloutRequest } from "../../shared/protocol/messages.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { readLedger } from "../../trainer-image/trainer/ledger.ts";
import { runTrainer } from "../../trainer-image/trainer/trainer.ts";
import { type MotoServer, startMoto } from "../support/moto.ts";
import { deliver, fakeTrajectory, publishBase, TINY_MODEL } from "./trainerHelpers.ts";

/** The feeder and the trainer on SQS + S3 (a real moto server): same code as the local transport. */
let moto: MotoServer;

beforeAll(async () => {
  moto = await startMoto();
});
afterAll(async () => {
  await moto?.stop();
});

const configFor = (prefix: string) =>
  parseConfig({
    experimentId: "aws",
    policy: { backend: "cpu", model: TINY_MODEL },
    tasks: { mix: [{ name: "db", trainInstances: 5 }] },
    rollout: { groupSize: 2, maxTotalTokens: 64, maxTokensPerTurn: 16 },
    trainer: { batchSize: 2, warmupFactor: 1, maxSteps: 2 },
    transport: {
      kind: "aws",
      endpoint: moto.endpoint,
      queuePrefix: prefix,
      trajectoryBucket: `${prefix}-traj`,
      checkpointBucket: `${prefix}-ckpt`,
      visibilityTimeoutSeconds: 30,
    },
  });

describe("roles on the aws transport (moto)", () => {
  it("feeder: sends interleaved groups up to the in-flight cap", async () => {
    const config = configFor("feed");
    const transport = await createTransport(config.transport);
    try {
      const summary = await runFeeder(config, transport, { maxGroups: 3, pollMs: 20 });
      expect(summary.requestsSent).toBe(6);
      const got = await transport.queue("rollout-requests").receive({ maxMessages: 10, waitSeconds: 1 });
      const requests = got.map((m) => RolloutRequest.parse(JSON.parse(m.body)));
      expect(new Set(requests.map((r) => r.groupId)).size).toBe(3);
    } finally {
      await transport.close();
    }
  });

  it("trainer: two steps published to S3, events on SQS, trajectories acknowledged", async () => {
    const config = configFor("train");
    const transport = await createTransport(config.transport);
    try {
      await publishBase(transport);
      const batch = (step: number) =>
        [0, 1].flatMap((g) => [0, 1].map((s) => fakeTrajectory("aws", `a${step}g${g}`, s, s === 0 ? 1 : 0)));
      await deliver(transport, batch(0));
      const summary = await runTrainer(config, transport, {
        waitSeconds: 1,
        onStep: (info) => {
          if (info.step === 1) void deliver(transport, batch(1));
        },
      });
      expect(summary).toMatchObject({ step: 2, version: 2 });
      expect(await listVersions(transport.store("checkpoints"))).toEqual([2, 1, 0]);
      expect((await readLedger(transport.store("checkpoints"), 2))?.consumed).toHaveLength(8);
      const depth = await transport.queue("trajectories").approximateDepth();
      expect(depth.visible + depth.inFlight).toBe(0);
      const events = await transport.queue("policy-events").receive({ maxMessages: 10, waitSeconds: 1 });
      expect(events).toHaveLength(2);
    } finally {
      await transport.close();
    }
  });
});
