import { createServer } from "node:net";

/**
 * A TCP port free right now on 127.0.0.1. Used where a port must be known before the process that
 * binds it starts: a server role restarted after a crash must come back on the URL the other
 * roles already hold, and a launched env worker's address is announced before it listens.
 * Another process may take the port in between; callers that cannot retry should pass 0 instead.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
