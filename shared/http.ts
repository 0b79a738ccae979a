import type { AddressInfo } from "node:net";
import { serve } from "@hono/node-server";
import { type Context, Hono } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import { AgentRlError, parseJsonOrThrow, ValidationError } from "./errors.ts";
import type { Logger } from "./log.ts";

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

/** Reads and validates a JSON body; failures become 400 with the failing field paths. */
export async function readJson<S extends z.ZodType>(c: Context, schema: S, what: string): Promise<z.output<S>> {
  return parseJsonOrThrow(schema, await c.req.text(), what);
}

/**
 * A Hono app whose errors never crash the process: ValidationError -> 400 `{error, issues}`,
 * HttpError -> its status, anything else -> 500 (logged).
 */
export function createApp(log: Logger): Hono {
  const app = new Hono();
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

/** Serves `app` on host:port (port 0 picks a free one) and resolves once it listens. */
export function listen(app: Hono, port = 0, host = "127.0.0.1"): Promise<RunningServer> {
  return new Promise((resolve, reject) => {
    const server = serve({ fetch: app.fetch, port, hostname: host }, (info: AddressInfo) => {
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
    server.once("error", reject);
  });
}
