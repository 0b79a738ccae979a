import { z } from "zod";
import { parseOrThrow } from "../errors.ts";
import { InvalidObjectKeyError } from "./errors.ts";
import type { ReceiveOptions } from "./types.ts";

/**
 * Limits shared by both implementations. They are SQS's own, so a program that runs on the
 * local transport never meets a surprise on SQS.
 */
export const QUEUE_LIMITS = {
  maxMessagesPerReceive: 10,
  maxWaitSeconds: 20,
  maxVisibilityTimeoutSeconds: 43_200,
  /** SQS's classic message size limit; trajectories travel through the object store, not the queue. */
  maxBodyBytes: 262_144,
  maxBatchEntries: 10,
  /** Longer failure reasons are cut (an SQS message attribute should stay small). */
  maxReasonChars: 4_000,
  maxKeyBytes: 1_024,
} as const;

/** Receive options with defaults filled in; the visibility timeout stays optional (queue default). */
export const ReceiveOptionsSchema = z
  .object({
    maxMessages: z.number().int().min(1).max(QUEUE_LIMITS.maxMessagesPerReceive).default(1),
    waitSeconds: z.number().int().min(0).max(QUEUE_LIMITS.maxWaitSeconds).default(0),
    visibilityTimeoutSeconds: z.number().int().min(0).max(QUEUE_LIMITS.maxVisibilityTimeoutSeconds).optional(),
  })
  .strict();

/** Validated receive options. */
export type ParsedReceiveOptions = z.output<typeof ReceiveOptionsSchema>;

/**
 * Validates `receive` options, naming the failing field.
 * @example parseReceiveOptions({ maxMessages: 11 }) // throws ValidationError "maxMessages: ..."
 */
export function parseReceiveOptions(options: ReceiveOptions | undefined): ParsedReceiveOptions {
  return parseOrThrow(ReceiveOptionsSchema, options ?? {}, "receive options");
}

const VisibilitySchema = z.number().int().min(0).max(QUEUE_LIMITS.maxVisibilityTimeoutSeconds);

/** Validates a visibility timeout in seconds (integer 0..43200). */
export function parseVisibilityTimeout(seconds: number): number {
  return parseOrThrow(VisibilitySchema, seconds, "visibilityTimeoutSeconds");
}

const BodySchema = z
  .string()
  .min(1, "a message body must not be empty")
  .refine((body) => Buffer.byteLength(body) <= QUEUE_LIMITS.maxBodyBytes, {
    message: `a message body must be at most ${QUEUE_LIMITS.maxBodyBytes} bytes; put large payloads in the object store`,
  });

/** Validates one message body (non-empty, at most 256 KiB). */
export function assertValidBody(body: string, index?: number): void {
  parseOrThrow(BodySchema, body, index === undefined ? "message body" : `message body [${index}]`);
}

/** Validates every body of a batch, naming the failing index. */
export function assertValidBodies(bodies: readonly string[]): void {
  for (const [index, body] of bodies.entries()) assertValidBody(body, bodies.length > 1 ? index : undefined);
}

/** Failure reasons are stored as given, cut to a bounded length; an empty reason gets a placeholder. */
export function normalizeReason(reason: string): string {
  const trimmed = reason.trim();
  if (trimmed === "") return "(no reason given)";
  return trimmed.length > QUEUE_LIMITS.maxReasonChars ? `${trimmed.slice(0, QUEUE_LIMITS.maxReasonChars)}…` : trimmed;
}

/**
 * Throws InvalidObjectKeyError unless `key` is a safe relative '/'-separated key.
 * @example assertValidObjectKey("policies/v3/manifest.json") // ok
 * @example assertValidObjectKey("../etc/passwd") // throws
 */
export function assertValidObjectKey(key: string): void {
  if (key === "") throw new InvalidObjectKeyError(key, "empty key");
  checkCommon(key);
  for (const segment of key.split("/")) checkSegment(key, segment);
}

/**
 * Throws InvalidObjectKeyError unless `prefix` could start a valid key. The empty prefix lists
 * everything; the last segment may be partial (`policies/v1` matches `policies/v10/...`) or empty
 * (`policies/`).
 */
export function assertValidPrefix(prefix: string): void {
  if (prefix === "") return;
  checkCommon(prefix);
  const segments = prefix.split("/");
  const last = segments.pop() ?? "";
  for (const segment of segments) checkSegment(prefix, segment);
  if (last === "." || last === "..") throw new InvalidObjectKeyError(prefix, `segment '${last}' is not allowed`);
}

function checkCommon(key: string): void {
  if (Buffer.byteLength(key) > QUEUE_LIMITS.maxKeyBytes)
    throw new InvalidObjectKeyError(key, `longer than ${QUEUE_LIMITS.maxKeyBytes} bytes`);
  if (key.startsWith("/")) throw new InvalidObjectKeyError(key, "absolute keys are not allowed");
  if (key.includes("\\")) throw new InvalidObjectKeyError(key, "'\\' is not allowed");
  if (key.includes("\0")) throw new InvalidObjectKeyError(key, "NUL is not allowed");
}

function checkSegment(key: string, segment: string): void {
  if (segment === "") throw new InvalidObjectKeyError(key, "empty segment ('//' or a trailing '/')");
  if (segment === "." || segment === "..") throw new InvalidObjectKeyError(key, `segment '${segment}' is not allowed`);
}
