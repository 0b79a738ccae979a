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

/** sha256 of a secret: what a server keeps instead of the secret itself. */
export function sha256(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}

/** True when the `authorization` header carries exactly the token whose sha256 is `expected`. */
export function bearerMatchesDigest(header: string | undefined, expected: Buffer): boolean {
  const match = /^Bearer (\S+)$/i.exec(header?.trim() ?? "");
  return match !== null && timingSafeEqual(sha256(match[1] ?? ""), expected);
}

/** True when the `authorization` header carries exactly `Bearer <secret>`. */
export function bearerMatches(header: string | undefined, secret: string): boolean {
  return bearerMatchesDigest(header, sha256(secret));
}

/**
 * Middleware answering 401 (before the body is read, so nothing changes) unless the request
 * carries `Bearer <secret>`. With no secret it lets everything through.
 * @example app.use("/api/*", requireBearer(secrets.envSecret, "env workers"))
 */
export function requireBearer(secret: string | undefined, who: string): MiddlewareHandler {
  // hashed once, not on every request (the controller checks a secret on each of thousands a second)
  const expected = secret === undefined ? undefined : sha256(secret);
  return async (c, next) => {
    if (expected === undefined || bearerMatchesDigest(c.req.header("authorization"), expected)) return next();
    c.header("www-authenticate", 'Bearer realm="agentrl"');
    return c.json(
      { error: `unauthorized: this endpoint is for ${who} and needs "authorization: Bearer <secret>"` },
      401,
    );
  };
}
