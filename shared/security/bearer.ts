import { createHash, timingSafeEqual } from "node:crypto";
import type { MiddlewareHandler } from "hono";

/**
 * Bearer-token checks for our HTTP servers. The comparison hashes both sides first so it takes
 * the same time whatever the token's length or content (no timing oracle on the secret).
 */

/** `{authorization: "Bearer <secret>"}`, or nothing when no secret is configured. */
export function bearerHeader(secret: string | undefined): Record<string, string> {
  return secret === undefined ? {} : { authorization: `Bearer ${secret}` };
}

/** True when the `authorization` header carries exactly `Bearer <secret>`. */
export function bearerMatches(header: string | undefined, secret: string): boolean {
  const match = /^Bearer (\S+)$/i.exec(header?.trim() ?? "");
  const given = createHash("sha256")
    .update(match?.[1] ?? "")
    .digest();
  const expected = createHash("sha256").update(secret).digest();
  return match !== null && timingSafeEqual(given, expected);
}

/**
 * Middleware answering 401 (before the body is read, so nothing changes) unless the request
 * carries `Bearer <secret>`. With no secret it lets everything through.
 * @example app.use("/api/*", requireBearer(secrets.envSecret, "env workers"))
 */
export function requireBearer(secret: string | undefined, who: string): MiddlewareHandler {
  return async (c, next) => {
    if (secret === undefined || bearerMatches(c.req.header("authorization"), secret)) return next();
    c.header("www-authenticate", 'Bearer realm="agentrl"');
    return c.json(
      { error: `unauthorized: this endpoint is for ${who} and needs "authorization: Bearer <secret>"` },
      401,
    );
  };
}
