import { createServer, type Server, type Socket } from "node:net";
import { HeadBucketCommand } from "@aws-sdk/client-s3";
import { GetQueueUrlCommand } from "@aws-sdk/client-sqs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TransportConfig } from "../../shared/config/transport.ts";
import { createAwsClients } from "../../shared/transport/aws.ts";

/**
 * A server that accepts connections and never answers (a hung endpoint, a half-open connection):
 * every request must end in the SDK's TimeoutError once the socket has been silent for the idle
 * timeout (after its retries), rather than hang the role that sent it.
 */
describe("AWS clients against an endpoint that never answers", () => {
  let server: Server;
  const sockets = new Set<Socket>();
  let endpoint = "";

  beforeAll(async () => {
    server = createServer((socket) => {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      socket.resume();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("no TCP address");
    endpoint = `http://127.0.0.1:${address.port}`;
    process.env.AWS_ACCESS_KEY_ID ??= "testing";
    process.env.AWS_SECRET_ACCESS_KEY ??= "testing";
  });

  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it("SQS and S3 requests fail with a TimeoutError after the socket's idle timeout", async () => {
    const config = TransportConfig.parse({ kind: "aws", endpoint, region: "us-east-1" });
    const { sqs, s3 } = createAwsClients(config, { connectionMs: 1_000, idleMs: 300 });
    const started = Date.now();
    await expect(sqs.send(new GetQueueUrlCommand({ QueueName: "never-answered" }))).rejects.toMatchObject({
      name: "TimeoutError",
    });
    await expect(s3.send(new HeadBucketCommand({ Bucket: "never-answered" }))).rejects.toMatchObject({
      name: "TimeoutError",
    });
    // Three attempts each with backoff between them: seconds, not the forever of no timeout.
    expect(Date.now() - started).toBeLessThan(30_000);
    sqs.destroy();
    s3.destroy();
  }, 60_000);
});
