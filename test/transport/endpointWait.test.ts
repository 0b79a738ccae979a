import { type AddressInfo, createServer, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { TransportConfig } from "../../shared/config/transport.ts";
import { AgentRlError } from "../../shared/errors.ts";
import { freePort } from "../../shared/net.ts";
import { createTransport, type Transport, TransportError } from "../../shared/transport/index.ts";
import { AGENTRL_BIN, runProcess } from "../support/cli.ts";
import { type MotoServer, setDummyAwsCredentials, startMoto } from "../support/moto.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The README starts moto in the background and trains against it on the next line, so the first
 * requests may meet a server that is not listening yet: creating the queues and buckets waits for
 * it (transport.endpointWaitSeconds), and an endpoint that never comes up fails with one line.
 */
describe("an AWS endpoint that is not up yet", () => {
  let moto: MotoServer | undefined;
  let transport: Transport | undefined;
  afterEach(async () => {
    await transport?.close();
    await moto?.stop();
    transport = moto = undefined;
  });

  it("is waited for: the resources are created once it listens, and the wait is reported once", async () => {
    setDummyAwsCredentials();
    const port = await freePort();
    const endpoint = `http://127.0.0.1:${port}`;
    const waits: string[] = [];
    const opening = createTransport(TransportConfig.parse({ kind: "aws", endpoint, queuePrefix: "late" }), {
      onEndpointWait: (reason) => waits.push(reason),
    });
    // nothing listens for a while; then moto comes up on that port
    await new Promise((r) => setTimeout(r, 1500));
    moto = await startMoto(55_000, "127.0.0.1", port);
    transport = await opening;
    expect(waits).toHaveLength(1);
    expect(waits[0]).toContain("ECONNREFUSED");
    const queue = transport.queue("rollout-requests");
    await queue.send("after the wait");
    const [message] = await queue.receive({ maxMessages: 1, waitSeconds: 1 });
    expect(message?.body).toBe("after the wait");
    await transport.store("checkpoints").put("probe", "stored");
    expect(await transport.store("checkpoints").getText("probe")).toBe("stored");
  }, 90_000);

  it("that never comes up fails after its wait with one error naming the endpoint and the setting", async () => {
    setDummyAwsCredentials();
    const endpoint = `http://127.0.0.1:${await freePort()}`;
    const started = Date.now();
    const failure = await createTransport(
      TransportConfig.parse({ kind: "aws", endpoint, endpointWaitSeconds: 2 }),
    ).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(TransportError);
    expect(failure).toBeInstanceOf(AgentRlError);
    expect((failure as Error).message).toMatch(
      new RegExp(
        `^cannot reach the AWS endpoint ${endpoint} to create the queues and buckets: .*ECONNREFUSED.*\\(tried for 2 s; transport\\.endpointWaitSeconds is 2; is moto or LocalStack running there\\?\\)$`,
      ),
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(2000);
  }, 60_000);

  it("that accepts connections and never answers fails at the end of its wait, not the SDK's minutes later", async () => {
    setDummyAwsCredentials();
    const silent = await silentServer();
    try {
      const started = Date.now();
      const failure = await createTransport(
        TransportConfig.parse({ kind: "aws", endpoint: silent.endpoint, endpointWaitSeconds: 2 }),
      ).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(TransportError);
      expect((failure as Error).message).toBe(
        `cannot reach the AWS endpoint ${silent.endpoint} to create the queues and buckets: no answer within 5 s (tried for 5 s; transport.endpointWaitSeconds is 2; is moto or LocalStack running there?)`,
      );
      expect(silent.connections()).toBeGreaterThan(0);
      // one try of at least 5 s, against the SDK's 60 s of silence times three tries
      expect(Date.now() - started).toBeLessThan(20_000);
    } finally {
      await silent.close();
    }
  }, 60_000);

  it("stops a request the endpoint never answers when its signal is aborted", async () => {
    setDummyAwsCredentials();
    const silent = await silentServer();
    try {
      const stop = new AbortController();
      const started = Date.now();
      setTimeout(() => stop.abort(), 500);
      const failure = await createTransport(
        TransportConfig.parse({ kind: "aws", endpoint: silent.endpoint, endpointWaitSeconds: 30 }),
        { signal: stop.signal },
      ).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(TransportError);
      expect((failure as Error).message).toBe(
        `stopped while waiting for the AWS endpoint ${silent.endpoint} (no answer yet)`,
      );
      expect(Date.now() - started).toBeLessThan(10_000);
    } finally {
      await silent.close();
    }
  }, 60_000);

  it("stops waiting when its signal is aborted (a stop during start-up)", async () => {
    setDummyAwsCredentials();
    const endpoint = `http://127.0.0.1:${await freePort()}`;
    const stop = new AbortController();
    const started = Date.now();
    setTimeout(() => stop.abort(), 500);
    const failure = await createTransport(TransportConfig.parse({ kind: "aws", endpoint, endpointWaitSeconds: 30 }), {
      signal: stop.signal,
    }).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(TransportError);
    expect((failure as Error).message).toMatch(
      new RegExp(`^stopped while waiting for the AWS endpoint ${endpoint} \\(.*ECONNREFUSED.*\\)$`),
    );
    expect(Date.now() - started).toBeLessThan(10_000); // not the 30 s wait
  }, 60_000);

  it("agentrl train says so in one line and exits 1, with no stack trace", async () => {
    const endpoint = `http://127.0.0.1:${await freePort()}`;
    const runDir = tempDir("agentrl-endpoint-wait-");
    const result = await runProcess(
      process.execPath,
      [
        AGENTRL_BIN,
        "train",
        ...["-c", "configs/example-experiment.yaml", "--transport", "aws", "--endpoint", endpoint],
        ...["--set", "transport.endpointWaitSeconds=1", "--run-dir", runDir],
      ],
      { env: { AWS_ACCESS_KEY_ID: "test", AWS_SECRET_ACCESS_KEY: "test" }, timeoutMs: 60_000 },
    );
    expect(result.status, result.stderr).toBe(1);
    expect(result.stderr).toContain(`agentrl: cannot reach the AWS endpoint ${endpoint}`);
    expect(result.stderr).toContain('"msg":"waiting for the AWS endpoint to accept connections"');
    expect(result.stderr).not.toMatch(/\n\s+at /);
    expect(result.stderr).not.toContain("unexpected error");
  }, 90_000);
});

/** A TCP server that accepts every connection and never answers. */
async function silentServer(): Promise<{ endpoint: string; connections: () => number; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    connections: () => accepted,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
