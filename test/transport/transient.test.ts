import { describe, expect, it } from "vitest";
import { AccessDeniedError, isTransientTransportError, MissingResourceError } from "../../shared/transport/errors.ts";

const named = (name: string, extra: Record<string, unknown> = {}) =>
  Object.assign(new Error(`${name} happened`), { name, ...extra });

describe("isTransientTransportError", () => {
  it("is true for what a later attempt may not meet: timeouts, throttling, 5xx, refused or reset sockets", () => {
    for (const error of [
      named("TimeoutError"),
      named("ThrottlingException"),
      named("SlowDown"),
      named("ServiceUnavailable"),
      named("Whatever", { $metadata: { httpStatusCode: 503 } }),
      named("Error", { code: "ECONNREFUSED" }),
      named("Error", { code: "ECONNRESET" }),
      new Error("wrapped", { cause: named("Error", { code: "ETIMEDOUT" }) }),
    ])
      expect(isTransientTransportError(error), error.name).toBe(true);
  });

  it("is false for a denial, a missing resource, a 4xx, a plain error or no error at all", () => {
    for (const error of [
      new AccessDeniedError("feeder", "sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:q"),
      new MissingResourceError("queue q does not exist"),
      new Error("wrapped denial", { cause: new AccessDeniedError("feeder", "s3:PutObject", "arn:aws:s3:::b/k") }),
      named("ValidationError", { $metadata: { httpStatusCode: 400 } }),
      new Error("a bug"),
      "TimeoutError",
      undefined,
    ])
      expect(isTransientTransportError(error)).toBe(false);
  });
});
