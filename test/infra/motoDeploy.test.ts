import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  CloudFormationClient,
  CreateStackCommand,
  DescribeStackResourcesCommand,
  DescribeStacksCommand,
} from "@aws-sdk/client-cloudformation";
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from "@aws-sdk/client-s3";
import {
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ReceiveMessageCommand,
  SendMessageCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import { DefaultStackSynthesizer } from "aws-cdk-lib";
import { Template } from "aws-cdk-lib/assertions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { messagingPropsFor } from "../../infra/agentRlApp.ts";
import { MessagingStack } from "../../infra/stacks/messagingStack.ts";
import { StoresStack } from "../../infra/stacks/storesStack.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { expandGrid, parseSweepSpec } from "../../shared/config/sweep.ts";
import { parseJsonOrThrow } from "../../shared/errors.ts";
import { RolloutRequest } from "../../shared/protocol/messages.ts";
import { s3Uploader } from "../../trainer-image/sweep/run.ts";
import { type MotoServer, startMoto } from "../support/moto.ts";
import { tempDir } from "../support/tmp.ts";
import { testApp } from "./synth.ts";

/**
 * Deploys the synthesized stateful stacks (buckets, queues + DLQs) into moto's CloudFormation and
 * uses what was created the way the roles do. The compute stack is not deployed: moto cannot run
 * ECS services from image assets.
 */
describe("stores + messaging stacks deployed into moto CloudFormation", () => {
  const config = parseConfig({ transport: { queuePrefix: "motoexp", maxReceiveCount: 3 } });
  let moto: MotoServer;
  let cfn: CloudFormationClient;
  let sqs: SQSClient;
  let s3: S3Client;
  const resources = new Map<string, string>();
  const outputs = new Map<string, string>();

  beforeAll(async () => {
    // One synth of just the two stateful stacks; no bootstrap rule (moto has no CDK bootstrap).
    const app = testApp();
    const synthesizer = () => new DefaultStackSynthesizer({ generateBootstrapVersionRule: false });
    const stores = new StoresStack(app, "AgentRlStores", { synthesizer: synthesizer(), analyticsReporting: false });
    const messaging = new MessagingStack(app, "AgentRlMessaging", {
      synthesizer: synthesizer(),
      analyticsReporting: false,
      messaging: messagingPropsFor(config),
    });
    const templates = {
      AgentRlStores: Template.fromStack(stores).toJSON(),
      AgentRlMessaging: Template.fromStack(messaging).toJSON(),
    };

    moto = await startMoto();
    const client = { endpoint: moto.endpoint, region: "us-east-1" };
    cfn = new CloudFormationClient(client);
    sqs = new SQSClient(client);
    s3 = new S3Client({ ...client, forcePathStyle: true });
    for (const [name, template] of Object.entries(templates)) {
      await cfn.send(new CreateStackCommand({ StackName: name, TemplateBody: JSON.stringify(template) }));
      const described = await cfn.send(new DescribeStacksCommand({ StackName: name }));
      expect(described.Stacks?.[0]?.StackStatus).toBe("CREATE_COMPLETE");
      for (const output of described.Stacks?.[0]?.Outputs ?? [])
        if (output.OutputKey && output.OutputValue) outputs.set(output.OutputKey, output.OutputValue);
      const created = await cfn.send(new DescribeStackResourcesCommand({ StackName: name }));
      for (const resource of created.StackResources ?? [])
        if (resource.LogicalResourceId && resource.PhysicalResourceId)
          resources.set(resource.LogicalResourceId, resource.PhysicalResourceId);
    }
  }, 180_000);

  afterAll(async () => {
    for (const client of [cfn, sqs, s3]) client?.destroy();
    await moto?.stop();
  });

  const physicalId = (prefix: string): string => {
    const match = [...resources.entries()].find(([logical]) => logical.startsWith(prefix));
    if (!match) throw new Error(`no deployed resource ${prefix}* among ${[...resources.keys()].join(", ")}`);
    return match[1];
  };

  it("creates each queue under the name the transport derives from queuePrefix, redriving to its DLQ", async () => {
    for (const suffix of ["rollout-requests", "trajectories", "policy-events"]) {
      const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: `motoexp-${suffix}` }));
      const { Attributes } = await sqs.send(
        new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["RedrivePolicy", "VisibilityTimeout"] }),
      );
      const redrive = JSON.parse(Attributes?.RedrivePolicy ?? "{}") as {
        deadLetterTargetArn?: string;
        maxReceiveCount?: number | string;
      };
      expect(redrive.deadLetterTargetArn).toMatch(new RegExp(`:motoexp-${suffix}-dlq$`));
      expect(Number(redrive.maxReceiveCount)).toBe(3);
    }
  });

  it("round-trips a RolloutRequest through the deployed rollout-requests queue", async () => {
    const { QueueUrl } = await sqs.send(new GetQueueUrlCommand({ QueueName: "motoexp-rollout-requests" }));
    const request: RolloutRequest = {
      schemaVersion: 1,
      experimentId: "motoexp",
      task: "db",
      index: 7,
      split: "train",
      groupId: "motoexp-db-7",
      sample: 2,
      groupSize: 4,
      attempt: 0,
    };
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: JSON.stringify(request) }));
    const received = await sqs.send(
      new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 1, WaitTimeSeconds: 2 }),
    );
    const message = received.Messages?.[0];
    expect(message?.Body).toBeDefined();
    expect(parseJsonOrThrow(RolloutRequest, message?.Body ?? "", "RolloutRequest")).toEqual(request);
    await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: message?.ReceiptHandle }));
  });

  it("puts and gets a trajectory object in the deployed trajectory bucket", async () => {
    const bucket = physicalId("StoresTrajectories");
    // The stack output names the same bucket (what `cdklocal deploy` users read).
    expect(outputs.get("TrajectoryBucketName")).toBe(bucket);
    const key = "trajectories/motoexp/g1/t1.json";
    const body = JSON.stringify({ trajectoryId: "t1", reward: 1 });
    await s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body }));
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    expect(await got.Body?.transformToString()).toBe(body);
  });

  it("uploads a sweep point's folder into the deployed checkpoint bucket under sweeps/<name>/<point>/", async () => {
    const bucket = physicalId("StoresCheckpoints");
    const spec = parseSweepSpec({ name: "up", grid: { "trainer.maxSteps": [2] } });
    const [point] = expandGrid(spec);
    if (!point) throw new Error("no grid point");
    const dir = tempDir("agentrl-upload-");
    mkdirSync(join(dir, "runs"), { recursive: true });
    writeFileSync(join(dir, "config.json"), "{}");
    writeFileSync(join(dir, "runs", "metrics.jsonl"), '{"step":1}\n');
    await s3Uploader(spec, { bucket, endpoint: moto.endpoint, region: "us-east-1" })(point, dir, [
      "config.json",
      join("runs", "metrics.jsonl"),
    ]);
    const listed = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: "sweeps/up/" }));
    expect((listed.Contents ?? []).map((o) => o.Key).sort()).toEqual([
      "sweeps/up/up-0/config.json",
      "sweeps/up/up-0/runs/metrics.jsonl",
    ]);
  });
});
