import { describe, expect, it } from "vitest";
import { describeDenial, parseDenial } from "../../infra/rehearse/rehearse.ts";

describe("the rehearsal's denials", () => {
  it("reads a role's access-denied line and names role, action and resource one way", () => {
    const line = JSON.stringify({
      level: 50,
      event: "access-denied",
      action: "sqs:SendMessage",
      resource: "arn:aws:sqs:us-east-1:123456789012:rehearsal-rollout-requests-dlq",
    });
    const denial = parseDenial(line, "rollout");
    expect(denial).toEqual({
      role: "rollout",
      action: "sqs:SendMessage",
      resource: "arn:aws:sqs:us-east-1:123456789012:rehearsal-rollout-requests-dlq",
    });
    expect(describeDenial(denial!)).toBe(
      "role rollout was denied sqs:SendMessage on arn:aws:sqs:us-east-1:123456789012:rehearsal-rollout-requests-dlq",
    );
  });

  it("ignores lines that are not denials, and a denial line that is not JSON", () => {
    expect(parseDenial('{"event":"started"}', "feeder")).toBeUndefined();
    expect(parseDenial("access-denied sqs:SendMessage", "feeder")).toBeUndefined();
    expect(parseDenial('{"event":"access-denied", broken', "feeder")).toBeUndefined();
  });
});
