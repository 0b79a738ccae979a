import type { AddressInfo } from "node:net";
import { type HttpBindings, serve } from "@hono/node-server";
import { type Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import { HttpLimitsConfig } from "./config/limits.ts";
import { AgentRlError, parseJsonOrThrow, ValidationError } from "./errors.ts";
import type { Logger } from "./log.ts";
import type { ServiceMetrics } from "./metrics.ts";

/** An error that maps to a specific HTTP status (404 unknown session, 406 worker full, ...). */
export class HttpError extends AgentRlError {
  override readonly name = "HttpError";
  constructor(
    readonly status: ContentfulStatusCode,
    message: string,
  ) {
    super(message);
  }
}

/** Set by createApp when Hono's bodyLimit has read (and replaced) a chunked body. */
const STREAMED = "agentrl.bodyStreamed";

/**
 * The request body as text. Under @hono/node-server it is read straight off the socket: the
 * WHATWG Request that `c.req.text()` builds (web stream, AbortSignal) costs about a third of the
 * controller's CPU per call. Use either this or `c.req.*` body readers in one handler, not both.
 */
export async function bodyText(c: Context): Promise<string> {
  const incoming = (c.env as Partial<HttpBindings> | undefined)?.incoming;
  if (!incoming || c.get(STREAMED as never)) return c.req.text();
  const chunks: Buffer[] = [];
  for await (const chunk of incoming) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

/** Reads and validates a JSON body; failures become 400 with the failing field paths. */
export async function readJson<S extends z.ZodType>(c: Context, schema: S, what: string): Promise<z.output<S>> {
  return parseJsonOrThrow(schema, await bodyText(c), what);
}

/** The limits every server gets unless told otherwise (limits.http defaults). */
export const DEFAULT_HTTP_LIMITS: HttpLimitsConfig = HttpLimitsConfig.parse({});

/**
 * A Hono app whose errors never crash the process: ValidationError -> 400 `{error, issues}`,
 * HttpError -> its status, anything else -> 500 (logged). Bodies larger than
 * `limits.bodyLimitBytes` answer 413: at once from Content-Length, or as soon as a chunked body
 * passes the limit, never after reading it in full. With `metrics`, every request is counted and
 * timed and `GET /metrics` serves them (shared/metrics.ts).
 */
export function createApp(
  log: Logger,
  limits: Pick<HttpLimitsConfig, "bodyLimitBytes"> = DEFAULT_HTTP_LIMITS,
  metrics?: ServiceMetrics,
): Hono {
  const app = new Hono();
  if (metrics) {
    // first, so that every request is counted and timed, the ones refused as too large included
    app.use("*", metrics.httpMiddleware());
    metrics.mount(app);
  }
  const tooLarge = (c: Context) =>
    c.json({ error: `request body exceeds ${limits.bodyLimitBytes} bytes (limits.http.bodyLimitBytes)` }, 413, {
      connection: "close",
    });
  const streamed = bodyLimit({ maxSize: limits.bodyLimitBytes, onError: tooLarge });
  app.use("*", async (c, next) => {
    // A declared length is checked from the headers alone; Hono's bodyLimit would first build a
    // WHATWG Request for every call just to ask whether there is a body.
    const headers = (c.env as Partial<HttpBindings> | undefined)?.incoming?.headers;
    if (headers && headers["transfer-encoding"] === undefined) {
      const declared = Number(headers["content-length"] ?? 0);
      return declared > limits.bodyLimitBytes ? tooLarge(c) : next();
    }
    c.set(STREAMED as never, true as never);
    return streamed(c, next);
  });
  app.onError((error, c) => {
    if (error instanceof ValidationError) return c.json({ error: error.message, issues: error.issues }, 400);
    if (error instanceof HttpError) return c.json({ error: error.message }, error.status);
    log.error({ err: error, path: c.req.path }, "unhandled error in request");
    return c.json({ error: `internal error: ${error.message}` }, 500);
  });
  app.notFound((c) => c.json({ error: `no route ${c.req.method} ${c.req.path}` }, 404));
  return app;
}

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/**
 * Serves `app` on host:port (port 0 picks a free one) and resolves once it listens. The server
 * drops clients that send headers or the request too slowly and refuses connections past the cap.
 */
export function listen(
  app: Hono,
  port = 0,
  host = "127.0.0.1",
  limits: Omit<HttpLimitsConfig, "bodyLimitBytes"> = DEFAULT_HTTP_LIMITS,
): Promise<RunningServer> {
  return new Promise((resolve, reject) => {
    const serverOptions = {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: Math.max(limits.requestTimeoutMs, limits.headersTimeoutMs),
      // how often Node checks those two timeouts; its default (30 s) would let a slow client linger
      connectionsCheckingInterval: Math.max(100, Math.min(1_000, limits.headersTimeoutMs / 2)),
    };
    const server = serve({ fetch: app.fetch, port, hostname: host, serverOptions }, (info: AddressInfo) => {
      resolve({
        url: `http://${host}:${info.port}`,
        port: info.port,
        close: () =>
          new Promise<void>((done) => {
            if ("closeAllConnections" in server) server.closeAllConnections();
            server.close(() => done());
          }),
      });
    });
    server.maxConnections = limits.maxConnections;
    server.once("error", reject);
  });
}
