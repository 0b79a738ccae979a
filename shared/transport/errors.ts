import { AgentRlError } from "../errors.ts";

/** Base class of every error a transport raises on purpose (bad key, stale receipt, missing resource). */
export class TransportError extends AgentRlError {
  override readonly name: string = "TransportError";
}

/**
 * An object key (or list prefix) that is not allowed: empty, absolute, with `..`/`.`/empty segments,
 * a backslash or a NUL. Both implementations reject the same keys, so a key that works locally
 * works on S3 and can never escape the local store's directory.
 */
export class InvalidObjectKeyError extends TransportError {
  override readonly name = "InvalidObjectKeyError";
  constructor(
    readonly key: string,
    reason: string,
  ) {
    super(
      `invalid object key ${JSON.stringify(key)}: ${reason} (allowed: relative '/'-separated segments, no '.', '..' or empty segments, no '\\' or NUL, at most 1024 bytes)`,
    );
  }
}

/**
 * A receipt handle that no longer names an in-flight delivery (the message was deleted, failed or
 * redelivered to someone else). Raised by `changeVisibility`; `delete` and `fail` ignore stale handles.
 */
export class ReceiptHandleError extends TransportError {
  override readonly name = "ReceiptHandleError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** A queue or bucket the transport needs does not exist (run `ensureResources()` or deploy the stack). */
export class MissingResourceError extends TransportError {
  override readonly name = "MissingResourceError";
}

/** IAM denied a call: names the role (AGENTRL_ROLE), the IAM action and the resource ARN. */
export class AccessDeniedError extends TransportError {
  override readonly name = "AccessDeniedError";
  constructor(
    readonly role: string,
    readonly action: string,
    readonly resource: string,
    options?: { cause?: unknown },
  ) {
    super(`access denied: role ${role} may not ${action} on ${resource}`, options);
  }
}

/** Error names of the AWS SDK for a request that a later attempt may not meet. */
const TRANSIENT_NAMES = new Set([
  "TimeoutError",
  "RequestTimeout",
  "RequestTimeoutException",
  "ThrottlingException",
  "Throttling",
  "RequestThrottled",
  "SlowDown",
  "ServiceUnavailable",
  "InternalError",
  "InternalFailure",
]);
/** Socket errors of a connection that may open next time. */
const TRANSIENT_CODES = new Set(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "EAI_AGAIN", "EHOSTUNREACH"]);

/**
 * True for a transport error that may pass: a connection that did not open in time or was
 * refused or reset, throttling, a 5xx, after the SDK's own retries. A role that meets one waits
 * and carries on instead of exiting; a denial, a missing queue or a bad key is never transient.
 */
export function isTransientTransportError(error: unknown): boolean {
  for (let at = error, depth = 0; at instanceof Error && depth < 4; at = at.cause, depth++) {
    if (at instanceof TransportError) return false;
    const details = at as Error & { code?: unknown; $metadata?: { httpStatusCode?: unknown } };
    if (TRANSIENT_NAMES.has(at.name)) return true;
    if (typeof details.code === "string" && TRANSIENT_CODES.has(details.code)) return true;
    const status = details.$metadata?.httpStatusCode;
    if (typeof status === "number" && status >= 500) return true;
  }
  return false;
}
