import { Agent as HttpAgent, request as httpRequest, type IncomingMessage, type RequestOptions } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { bearerHeader } from "../../shared/security/bearer.ts";

/**
 * The controller's HTTP client for env workers: node:http over pooled keep-alive connections (one
 * Agent per scheme; Node's global fetch cost about 0.6 ms of CPU per call). What it keeps:
 * - the env secret goes, as a bearer token, on every call and only to the worker's own address:
 *   node:http follows no redirect, so a 3xx comes back as an `http` answer (callers treat it as a
 *   failed call), never as a request elsewhere;
 * - http and https only (registration refuses other schemes; {@link workerTarget} too);
 * - one deadline per call, covering the connection, the request and the whole reply body;
 * - replies larger than `maxReplyBytes` are cut off (`invalid`), so a worker cannot make the
 *   controller buffer without bound what it passes through to its callers.
 */
export interface WorkerClientOptions {
  /** AGENTRL_ENV_SECRET, sent as `authorization: Bearer` on every call. Unset: no header. */
  readonly envSecret?: string;
  /** Largest reply body read from a worker. @default 8 MiB (limits.http.bodyLimitBytes) */
  readonly maxReplyBytes?: number;
}

/** Where a worker's API lives, parsed once at registration (not once per call). */
export interface WorkerTarget {
  readonly https: boolean;
  readonly hostname: string;
  readonly port: number;
  /** The address's path without its trailing slash, e.g. `/api`. */
  readonly basePath: string;
}

/** How a call ended: `ok` is a 2xx, `http` any other status; the body is the worker's bytes. */
export type WorkerCall =
  | { readonly kind: "ok"; readonly status: number; readonly body: Buffer }
  | { readonly kind: "http"; readonly status: number; readonly body: Buffer }
  | { readonly kind: "timeout" }
  | { readonly kind: "unreachable"; readonly error: unknown }
  | { readonly kind: "invalid"; readonly why: string };

const DEFAULT_MAX_REPLY_BYTES = 8 * 1024 * 1024;

/**
 * Parses a worker address (`http://host:port/api`); throws a TypeError for anything but http(s).
 * @example workerTarget("http://10.0.0.7:5021/api") // { https: false, hostname: "10.0.0.7", port: 5021, basePath: "/api" }
 */
export function workerTarget(address: string): WorkerTarget {
  const url = new URL(address);
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new TypeError(`worker address ${address}: only http(s) is allowed`);
  const https = url.protocol === "https:";
  return {
    https,
    // [::1] in a URL, ::1 for a socket
    hostname: url.hostname.replace(/^\[(.*)\]$/, "$1"),
    port: url.port ? Number(url.port) : https ? 443 : 80,
    basePath: url.pathname.replace(/\/+$/, ""),
  };
}

/** A pooled keep-alive HTTP client for calls from the controller to its env workers. */
export class WorkerClient {
  // No cap on sockets per worker: a turn may run for minutes, and a capped pool would queue every
  // other session's turn behind it. Idle sockets stay open for reuse (LIFO keeps the warm ones).
  private readonly http = new HttpAgent({ keepAlive: true, maxFreeSockets: 256, scheduling: "lifo" });
  private readonly https = new HttpsAgent({ keepAlive: true, maxFreeSockets: 256, scheduling: "lifo" });
  private readonly auth: Record<string, string>;
  private readonly maxReplyBytes: number;

  constructor(options: WorkerClientOptions = {}) {
    this.auth = bearerHeader(options.envSecret);
    this.maxReplyBytes = options.maxReplyBytes ?? DEFAULT_MAX_REPLY_BYTES;
  }

  /**
   * `GET <address>/<path>` when `body` is undefined, else `POST` with `body` as JSON. Never throws.
   * @example const call = await client.call(worker.target, "get_sessions", undefined, 5_000);
   */
  async call(target: WorkerTarget, path: string, body: unknown, timeoutMs: number): Promise<WorkerCall> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const deadline = Date.now() + timeoutMs;
    for (let attempt = 0; ; attempt++) {
      const outcome = await this.once(target, path, payload, Math.max(1, deadline - Date.now()), attempt === 0);
      // A pooled socket the worker closed while idle fails before the worker read the request;
      // one retry on a fresh, unpooled connection tells that race from a dead worker. Only a
      // reused socket qualifies: a reset on a fresh connection is the worker's doing.
      if (outcome.kind === "stale" && attempt === 0) continue;
      return outcome.kind === "stale" ? { kind: "unreachable", error: outcome.error } : outcome;
    }
  }

  /** Closes every pooled connection (in-flight calls fail as unreachable). */
  close(): void {
    this.http.destroy();
    this.https.destroy();
  }

  private once(
    target: WorkerTarget,
    path: string,
    payload: Buffer | undefined,
    timeoutMs: number,
    pooled: boolean,
  ): Promise<WorkerCall | { kind: "stale"; error: unknown }> {
    return new Promise((resolve) => {
      let settled = false;
      const settle = (outcome: WorkerCall | { kind: "stale"; error: unknown }) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(outcome);
      };
      const headers: Record<string, string> = { ...this.auth };
      if (payload) {
        headers["content-type"] = "application/json";
        headers["content-length"] = String(payload.length);
      }
      const options: RequestOptions = {
        hostname: target.hostname,
        port: target.port,
        path: `${target.basePath}/${path}`,
        method: payload ? "POST" : "GET",
        headers,
        agent: pooled ? (target.https ? this.https : this.http) : false,
      };
      const req = (target.https ? httpsRequest : httpRequest)(options, (res) =>
        this.readReply(res, (outcome) => {
          if (outcome.kind === "invalid") req.destroy();
          settle(outcome);
        }),
      );
      const timer = setTimeout(() => {
        settle({ kind: "timeout" });
        req.destroy();
      }, timeoutMs);
      timer.unref();
      req.on("error", (error: NodeJS.ErrnoException) => {
        const stale = req.reusedSocket && (error.code === "ECONNRESET" || error.code === "EPIPE");
        settle(stale ? { kind: "stale", error } : { kind: "unreachable", error });
      });
      req.end(payload);
    });
  }

  private readReply(res: IncomingMessage, done: (outcome: WorkerCall) => void): void {
    const status = res.statusCode ?? 0;
    const limit = this.maxReplyBytes;
    const tooLarge = () => done({ kind: "invalid", why: `reply body over ${limit} bytes` });
    if (Number(res.headers["content-length"] ?? 0) > limit) {
      tooLarge();
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    res.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) tooLarge();
      else chunks.push(chunk);
    });
    res.on("end", () => {
      const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks);
      done({ kind: status >= 200 && status < 300 ? "ok" : "http", status, body });
    });
    res.on("error", (error) => done({ kind: "unreachable", error }));
    // The connection dropped mid-body (no "end"): the worker went away while answering.
    res.on("close", () => {
      if (!res.complete) done({ kind: "unreachable", error: new Error("worker closed the connection mid-reply") });
    });
  }
}

/** A short description of a failed call for logs and error bodies (never the secret). */
export function describeCall(call: WorkerCall): string {
  switch (call.kind) {
    case "timeout":
      return "timed out";
    case "invalid":
      return call.why;
    case "unreachable": {
      const error = call.error as (Error & { code?: string; cause?: { code?: string } }) | undefined;
      return error?.code ?? error?.cause?.code ?? (error instanceof Error ? error.message : String(call.error));
    }
    default:
      return `HTTP ${call.status}`;
  }
}
