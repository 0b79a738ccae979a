import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ephemeralPortRange, freePort } from "../../shared/net.ts";

describe("ephemeralPortRange", () => {
  it("reads Linux's ip_local_port_range", () => {
    expect(ephemeralPortRange(() => "32768\t60999\n")).toEqual([32768, 60999]);
  });

  it("falls back to IANA's dynamic range when the file is missing or garbled", () => {
    const missing = () => {
      throw new Error("ENOENT");
    };
    expect(ephemeralPortRange(missing)).toEqual([49152, 65535]);
    expect(ephemeralPortRange(() => "nonsense")).toEqual([49152, 65535]);
    expect(ephemeralPortRange(() => "60999 32768")).toEqual([49152, 65535]);
  });
});

describe("freePort", () => {
  const servers: Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  it("picks below the ephemeral range, where outgoing connections never take a port", async () => {
    const [low] = ephemeralPortRange();
    for (let i = 0; i < 10; i++) {
      const port = await freePort();
      expect(port).toBeGreaterThanOrEqual(10_000);
      expect(port).toBeLessThan(low);
    }
  });

  it("never hands out the same port twice, even from a small range", async () => {
    const range = [22_000, 22_120] as const; // below the ephemeral range: no outgoing connection holds one
    const ports = [];
    for (let i = 0; i < 60; i++) ports.push(await freePort(range));
    expect(new Set(ports).size).toBe(60);
    for (const port of ports) expect(port >= range[0] && port <= range[1], String(port)).toBe(true);
  });

  it("skips ports something listens on, and the port it answers can be listened on", async () => {
    const range = [23_000, 23_100] as const; // below the ephemeral range: no outgoing connection holds one
    const taken = new Set<number>();
    for (let port = range[0]; port <= range[1]; port += 2) {
      const server = createServer();
      const listened = await new Promise<boolean>((resolve) => {
        server.once("error", () => resolve(false));
        server.listen(port, "127.0.0.1", () => resolve(true));
      });
      if (listened) {
        servers.push(server);
        taken.add(port);
      }
    }
    expect(taken.size).toBeGreaterThan(40);
    for (let i = 0; i < 20; i++) {
      const port = await freePort(range);
      expect(taken.has(port)).toBe(false);
      const server = createServer();
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen(port, "127.0.0.1", resolve);
      });
      servers.push(server);
      taken.add(port);
    }
  });
});
