import { describe, expect, it } from "vitest";
import {
  failurePathReason,
  grantsOf,
  iamMatches,
  parseAuthorizationLog,
  unneededGrants,
} from "../../infra/rehearse/grantUse.ts";

const bucket = "arn:aws:s3:::traj";
const queue = "arn:aws:sqs:us-east-1:123456789012:exp-trajectories";

describe("which grants a rehearsal needed", () => {
  it("matches IAM wildcards over the whole string", () => {
    expect(iamMatches(`${bucket}/feeder/*`, `${bucket}/feeder/exp/cursor.json`)).toBe(true);
    expect(iamMatches(`${bucket}/feeder/*`, `${bucket}/trajectories/x`)).toBe(false);
    expect(iamMatches(`${bucket}/feeder/*`, `${bucket}/feeder`)).toBe(false);
    expect(iamMatches("s3:Get?bject", "s3:GetObject")).toBe(true);
    expect(iamMatches("arn:aws:s3:::a.b", "arn:aws:s3:::aXb")).toBe(false);
  });

  it("counts a grant needed only when it alone permitted some request of its role", () => {
    const feeder = grantsOf("feeder", [
      { Effect: "Allow", Action: ["s3:GetObject", "s3:PutObject"], Resource: `${bucket}/feeder/*` },
      { Effect: "Allow", Action: "sqs:SendMessage", Resource: [queue] },
    ]);
    const rollout = grantsOf("rollout", [
      { Effect: "Allow", Action: "s3:GetObject", Resource: [`${bucket}/*`, `${bucket}/trajectories/*`] },
    ]);
    expect(feeder).toHaveLength(3);
    const keys = new Map([
      ["AKFEEDER", "feeder"],
      ["AKROLLOUT", "rollout"],
    ]);
    const requests = [
      { accessKeyId: "AKFEEDER", action: "s3:PutObject", resource: `${bucket}/feeder/exp/cursor.json` },
      { accessKeyId: "AKFEEDER", action: "s3:GetObject", resource: `${bucket}/feeder/exp/cursor.json` },
      // the admin's requests and another role's do not make the feeder's SendMessage needed
      { accessKeyId: "AKADMIN", action: "sqs:SendMessage", resource: queue },
      // two rollout grants permit this one: neither is needed (dropping one would not deny it)
      { accessKeyId: "AKROLLOUT", action: "s3:GetObject", resource: `${bucket}/trajectories/a.json` },
    ];
    const unneeded = unneededGrants([...feeder, ...rollout], requests, keys);
    expect(unneeded.map((g) => `${g.role} ${g.action} ${g.resource}`)).toEqual([
      `feeder sqs:SendMessage ${queue}`,
      `rollout s3:GetObject ${bucket}/*`,
      `rollout s3:GetObject ${bucket}/trajectories/*`,
    ]);
  });

  it("explains only a ListBucket grant (S3's missing-key rule); dead-letter and visibility grants must be used", () => {
    const grant = (action: string, resource: string) => ({ role: "trainer", action, resource });
    expect(failurePathReason(grant("s3:ListBucket", bucket))).toMatch(/404 only to a caller that may list/);
    // the rehearsal's poison messages use these: unused, they are unexplained
    expect(failurePathReason(grant("sqs:SendMessage", `${queue}-dlq`))).toBeUndefined();
    expect(failurePathReason(grant("sqs:ChangeMessageVisibility", queue))).toBeUndefined();
    expect(failurePathReason(grant("sqs:SendMessage", queue))).toBeUndefined();
    expect(failurePathReason(grant("sqs:GetQueueAttributes", queue))).toBeUndefined();
  });

  it("reads moto's authorization log and refuses a malformed line", () => {
    const line = JSON.stringify({ accessKeyId: "AK", action: "s3:GetObject", resource: `${bucket}/k` });
    expect(parseAuthorizationLog(`${line}\n\n${line}\n`)).toHaveLength(2);
    expect(() => parseAuthorizationLog('{"action":"s3:GetObject"}')).toThrow(/malformed authorization log line/);
  });
});
