import { GetQueueAttributesCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AwsTransport } from "../../shared/transport/aws.ts";
import { MissingResourceError } from "../../shared/transport/errors.ts";
import { type MotoServer, startMoto } from "../support/moto.ts";
import { registerTransportConformance } from "./conformance.ts";
import { registerCrashSafety } from "./crash.ts";
import { awsTarget } from "./target.ts";

let moto: MotoServer;
const target = awsTarget(() => moto.endpoint);

beforeAll(async () => {
  moto = await startMoto();
});
afterAll(async () => {
  await moto?.stop();
});

describe("aws transport conformance (moto server)", () => {
  registerTransportConformance(() => target);
  registerCrashSafety(() => target, { objectBytes: 2 * 1024 * 1024 });
});

describe.concurrent("aws transport resources", () => {
  it("names a missing queue and how to create it", async () => {
    const transport = new AwsTransport(await target.freshConfig());
    try {
      const send = transport.queue("rollout-requests").send("x");
      await expect(send).rejects.toBeInstanceOf(MissingResourceError);
      await expect(send).rejects.toThrow(/-rollout-requests does not exist at http:\/\/127\.0\.0\.1:\d+; create it/);
    } finally {
      await transport.close();
    }
  });

  it("fail with a handle received by another process makes the message visible again", async () => {
    const config = await target.freshConfig({ maxReceiveCount: 5 });
    const receiver = new AwsTransport(config);
    const failer = new AwsTransport(config);
    try {
      await receiver.ensureResources();
      await receiver.queue("rollout-requests").send("job");
      const [first] = await receiver.queue("rollout-requests").receive({ visibilityTimeoutSeconds: 60 });
      await failer.queue("rollout-requests").fail(first!.receiptHandle, "seen elsewhere");
      const [again] = await receiver.queue("rollout-requests").receive({ waitSeconds: 5 });
      expect(again).toMatchObject({ id: first!.id, receiveCount: 2 });
    } finally {
      await receiver.close();
      await failer.close();
    }
  });

  it("ensureResources creates each queue with a DLQ redrive policy, and can run again", async () => {
    const config = await target.freshConfig({ maxReceiveCount: 4, visibilityTimeoutSeconds: 45 });
    const transport = new AwsTransport(config);
    try {
      await transport.ensureResources();
      await transport.ensureResources();
      const queue = transport.queue("trajectories");
      const out = await transport.sqs.send(
        new GetQueueAttributesCommand({ QueueUrl: await queue.url(), AttributeNames: ["All"] }),
      );
      expect(out.Attributes?.VisibilityTimeout).toBe("45");
      const redrive = JSON.parse(out.Attributes?.RedrivePolicy ?? "{}") as Record<string, unknown>;
      expect(redrive.maxReceiveCount).toBe(4);
      expect(String(redrive.deadLetterTargetArn)).toMatch(new RegExp(`:${config.queuePrefix}-trajectories-dlq$`));
      expect(await queue.deadLetterUrl()).toMatch(/-trajectories-dlq$/);
      await transport.store("checkpoints").put("probe", "ok");
      expect(await transport.store("checkpoints").getText("probe")).toBe("ok");
    } finally {
      await transport.close();
    }
  });
});
