import { describe, expect, it } from "vitest";
import { byLine, describeDenial, parseDenial } from "../../infra/rehearse/rehearse.ts";
import { exitCodeOf } from "../../infra/rehearse/runners.ts";

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

  it("finds a denial line a pipe delivered in two reads, and no line twice", () => {
    const line = JSON.stringify({ event: "access-denied", action: "s3:PutObject", resource: "arn:aws:s3:::b/k" });
    const seen: string[] = [];
    const feed = byLine((l) => seen.push(l));
    feed('{"event":"started"}\n');
    feed(line.slice(0, 20));
    feed(`${line.slice(20)}\n{"event":"tick"`);
    expect(seen).toEqual(['{"event":"started"}', line]);
    expect(seen.map((l) => parseDenial(l, "feeder")).filter(Boolean)).toHaveLength(1);
    feed("}\n");
    expect(seen.at(-1)).toBe('{"event":"tick"}');
  });

  it("keeps only the last characters of an unfinished line longer than its limit", () => {
    const seen: string[] = [];
    const feed = byLine((l) => seen.push(l), 10);
    feed("x".repeat(25));
    feed("abc\n");
    expect(seen).toEqual([`${"x".repeat(10)}abc`]);
  });
});

describe("a rehearsed role's exit code", () => {
  it("is the code it exited with, or 128 + the signal's number as ECS and a shell report a signal death", () => {
    expect(exitCodeOf({ exitCode: 0, signalCode: null })).toBe(0);
    expect(exitCodeOf({ exitCode: null, signalCode: "SIGTERM" })).toBe(143);
    expect(exitCodeOf({ exitCode: null, signalCode: "SIGKILL" })).toBe(137);
    expect(exitCodeOf({ exitCode: null, signalCode: null })).toBeNull();
  });
});
