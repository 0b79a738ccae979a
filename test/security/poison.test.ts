import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { TrajectoryReady } from "../../shared/protocol/messages.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { runTrainer, type StepInfo } from "../../trainer-image/trainer/trainer.ts";
import { deliver, fakeTrajectory, publishBase, tinyTrainerConfig } from "../roles/trainerHelpers.ts";
import { tempDir } from "../support/tmp.ts";

/** A poison message never takes the trainer down: it fails to the DLQ with its reason, the rest trains. */
describe("trainer: poison TrajectoryReady messages", () => {
  let dir: string;
  let transport: Transport;
  // one failed delivery sends a message to the DLQ, so the test sees where it ends
  const config = () => tinyTrainerConfig(dir, { transport: { maxReceiveCount: 1 }, trainer: { maxSteps: 1 } });

  beforeEach(async () => {
    dir = tempDir("poison-");
    transport = await createTransport(config().transport);
    await publishBase(transport);
  });
  afterEach(async () => {
    await transport.close();
  });

  const goodBatch = () =>
    ["g0", "g1"].flatMap((groupId) => [0, 1].map((s) => fakeTrajectory("tr", groupId, s, s === 0 ? 1 : -0.2)));

  it("the schema rejects a key such as ../../etc/passwd; the message dead-letters with its reason", async () => {
    const [evil] = await deliver(transport, [fakeTrajectory("tr", "evil", 0, 1)]);
    // the same event again, now pointing outside the store
    await transport.queue("trajectories").send(JSON.stringify({ ...evil, key: "../../etc/passwd" }));
    expect(TrajectoryReady.safeParse({ ...evil, key: "../../etc/passwd" }).success).toBe(false);
    await deliver(transport, goodBatch());
    const steps: StepInfo[] = [];
    const summary = await runTrainer(config(), transport, { waitSeconds: 0, onStep: (s) => steps.push(s) });
    expect(summary.step).toBe(1);
    expect(steps[0]?.trajectories).toBe(4);
    const dead = await transport.queue("trajectories").deadLetters();
    expect(dead).toHaveLength(1);
    expect(dead[0]?.reason).toMatch(/key.*'\.\.' is not allowed/);
  });

  it("a trajectory that cannot be loaded fails its message with the reason; its group trains without it", async () => {
    const store = transport.store("trajectories");
    // g0-s1's key names a folder (no object there), g1-s0's object is not JSON: both were acknowledged and lost before
    const announced = await deliver(transport, goodBatch());
    const [, g0s1, g1s0] = announced;
    await store.delete(g0s1?.key ?? "");
    await store.put(`${g0s1?.key}/inside.json`, "{}");
    await store.put(g1s0?.key ?? "", "not json");
    const steps: StepInfo[] = [];
    await runTrainer(config(), transport, { waitSeconds: 0, onStep: (s) => steps.push(s) });
    expect(steps[0]?.trajectories).toBe(2);
    expect(steps[0]?.metrics["rollout/missing"]).toBe(2);
    const dead = await transport.queue("trajectories").deadLetters();
    expect(dead.map((d) => d.reason).sort()).toEqual([
      expect.stringMatching(/g0-s1\.json does not exist$/),
      expect.stringMatching(/g1-s0\.json is not JSON$/),
    ]);
    expect(dead.map((d) => (JSON.parse(d.body) as { trajectoryId: string }).trajectoryId).sort()).toEqual([
      "g0-s1",
      "g1-s0",
    ]);
  });
});
