import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { acceptsConnections } from "../../env-images/dbbench/privateServer.ts";

describe("the private MariaDB server's readiness check", () => {
  const dir = mkdtempSync(join(tmpdir(), "agentrl-socket-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("waits for a listener, not for the socket file: a file nobody listens on is refused", async () => {
    const socket = join(dir, "server.sock");
    expect(await acceptsConnections(socket)).toBe(false);
    // the file is there before the server listens (an episode connecting then got ECONNREFUSED)
    writeFileSync(socket, "");
    expect(await acceptsConnections(socket)).toBe(false);
    rmSync(socket);
    const server = createServer((connection) => connection.end());
    await new Promise<void>((resolve) => server.listen(socket, resolve));
    try {
      expect(await acceptsConnections(socket)).toBe(true);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
    expect(await acceptsConnections(socket)).toBe(false);
  });
});
