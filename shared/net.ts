import { readFileSync } from "node:fs";
import { createServer } from "node:net";

/** Where picked ports start: above the well-known services most machines run. */
const LOWEST_PICKED_PORT = 10_000;
/** Ports handed out by this process stay reserved this long (their user may not listen yet). */
const RESERVED_MS = 10 * 60_000;
const handedOut = new Map<number, number>();

/**
 * The range the kernel takes outgoing connections' local ports from (Linux's
 * `ip_local_port_range`; elsewhere IANA's dynamic range, the macOS and Windows default).
 */
export function ephemeralPortRange(
  read: () => string = () => readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8"),
): readonly [number, number] {
  try {
    const [low, high] = read().trim().split(/\s+/).map(Number);
    if (Number.isInteger(low) && Number.isInteger(high) && low! > 0 && low! <= high! && high! <= 65_535)
      return [low!, high!];
  } catch {
    // not Linux (or no /proc): the default below
  }
  return [49_152, 65_535];
}

/**
 * A TCP port free right now on 127.0.0.1. Used where a port must be known before the process that
 * binds it starts: the deploy rehearsal's moto server and role containers, whose addresses go into
 * each other's environment before any of them runs. Servers the launcher starts bind port 0
 * themselves and announce the port they got.
 *
 * It is picked below the ephemeral range: a port the kernel handed out (port 0) is the kind it
 * hands to the next outgoing connection too, which then holds it when its server starts
 * (EADDRINUSE, seen with many roles on one host). A port this process handed out is not handed out
 * again for ten minutes. Another process may still take the port in between; callers that cannot
 * retry should pass 0 instead.
 */
export async function freePort(range: readonly [number, number] = pickableRange()): Promise<number> {
  const now = Date.now();
  for (const [port, at] of handedOut) if (now - at > RESERVED_MS) handedOut.delete(port);
  const [low, high] = range;
  if (high - low >= 100)
    for (let attempt = 0; attempt < 50; attempt++) {
      const port = low + Math.floor(Math.random() * (high - low + 1));
      if (handedOut.has(port) || !(await bindable(port))) continue;
      handedOut.set(port, now);
      return port;
    }
  // no room below the ephemeral range (or all taken): any free port, as the kernel picks one
  return listenOn(0);
}

/** The ports {@link freePort} picks from: between the well-known services and the ephemeral range. */
function pickableRange(): readonly [number, number] {
  const [ephemeralLow] = ephemeralPortRange();
  return [LOWEST_PICKED_PORT, ephemeralLow - 1];
}

async function bindable(port: number): Promise<boolean> {
  try {
    await listenOn(port);
    return true;
  } catch {
    return false;
  }
}

/** Listens on `port` of 127.0.0.1, closes, and answers the port it got. */
function listenOn(port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => {
      const address = server.address();
      const bound = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(bound));
    });
  });
}
