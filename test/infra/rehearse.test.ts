import { readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import {
  REHEARSAL_GATEWAY_CONFIG,
  type RehearsalTemplates,
  rehearse,
  synthesizeForRehearsal,
} from "../../infra/rehearse/rehearse.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The deploy rehearsal (infra/rehearse/rehearse.ts, `npm run rehearse`): the stacks deployed into
 * moto with IAM enforced, one IAM user per task role with exactly the synthesized statements, v0
 * published as docs/deploy.md says, every role its own process through `agentrl container`. The
 * full run has `gateway.port` set, so the gateway runs as one more role (one rehearsal instead of
 * two; test/infra/containers.test.ts rehearses the deployment without it, every role a container).
 */
// The SDK's Node 20 notice would only clutter the output (as in test/support/moto.ts).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

/**
 * Runs `work` with the OS temp dir pointed at a fresh folder, which it must leave empty: the
 * rehearsal's temp files (its roles' run folders and configs, moto's log, the synthesized
 * assembly) are removed when it ends, however it ends.
 */
async function leavingNoTempFiles<T>(work: () => Promise<T>): Promise<T> {
  const folder = tempDir("agentrl-rehearse-tmpdir-");
  const before = process.env.TMPDIR;
  process.env.TMPDIR = folder;
  let result: T;
  try {
    result = await work();
  } finally {
    if (before === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = before;
  }
  expect(readdirSync(folder)).toEqual([]);
  return result;
}

/** The default deployment's templates, synthesized once for the runs that use them. */
let defaultTemplates: RehearsalTemplates | undefined;
function templates(): RehearsalTemplates {
  defaultTemplates ??= synthesizeForRehearsal();
  return defaultTemplates;
}

describe("deploy rehearsal under enforced IAM", () => {
  /** The rehearsal's log, shown by a failing assertion (what each role did, why one stopped). */
  const logged = (): { log: (line: string) => void; text: () => string } => {
    const lines: string[] = [];
    return { log: (line) => lines.push(line), text: () => lines.join("\n") };
  };

  it("runs every role and the gateway with its own task role's permissions until the trainer publishes v1 to v3", async () => {
    const run = logged();
    const result = await leavingNoTempFiles(() =>
      rehearse({ templates: synthesizeForRehearsal(REHEARSAL_GATEWAY_CONFIG), log: run.log }),
    );
    expect(result.failure, run.text()).toBe("");
    expect(result.denials).toEqual([]);
    expect(result.versions).toEqual([0, 1, 2, 3]);
    // The gateway served one agent session end to end through the deployed policy server.
    expect(run.text()).toMatch(/gateway session gs-\S+ \(after \d+ 429s\): released, trajectories \["gs-\S+-seg0"\]/);
    expect(result.readySeconds.gateway).toBeGreaterThan(0);
    // Each consumer failed its poison message to the queue's DLQ with the reason, after
    // maxReceiveCount deliveries (handed back with ChangeMessageVisibility before), and went on.
    expect(Object.keys(result.deadLetters).sort()).toEqual(["policy-events", "rollout-requests", "trajectories"]);
    expect(result.deadLetters.trajectories?.map((l) => [l.receiveCount, l.reason])).toEqual([
      [5, expect.stringMatching(/invalid TrajectoryReady: key: invalid object key "\.\.\/\.\.\/etc\/passwd"/)],
    ]);
    expect(result.deadLetters["rollout-requests"]?.[0]?.reason).toMatch(/invalid RolloutRequest: index/);
    expect(result.deadLetters["policy-events"]?.[0]?.reason).toMatch(/not a PolicyPublished event/);
    // Every grant was the only one permitting some request of the run (dropping it fails the run),
    // the gateway's and dead-letter and visibility grants included, but for one: the trainer reads
    // only trajectories that exist, so its ListBucket on that bucket (S3's 404 for a missing key) stays unused.
    expect(result.unneededGrants.map((g) => [g.role, g.action])).toEqual([["trainer", "s3:ListBucket"]]);
    expect(result.unneededGrants[0]?.resource).toMatch(/^arn:aws:s3:::agentrlstores-storestrajectories/);
    // Every role but the trainer (which exits by itself) was still running and stopped on SIGTERM.
    expect(Object.keys(result.stops).sort()).toEqual(
      ["controller", "env:db", "feeder", "gateway", "policy:current", "policy:stale", "rollout"].sort(),
    );
    for (const [key, stop] of Object.entries(result.stops)) {
      expect(stop.exitCode, key).toBe(0);
      expect(stop.seconds, key).toBeLessThan(stop.limitSeconds);
    }
    expect(result.passed).toBe(true);
  }, 400_000);

  it("fails naming role, action and resource when one needed grant is removed", async () => {
    const run = logged();
    const result = await rehearse({
      templates: templates(),
      dropGrant: { roleKey: "feeder", action: "s3:PutObject", resource: /\/feeder\/\*$/ },
      log: run.log,
    });
    expect(result.passed).toBe(false);
    expect(result.denials[0], `${result.failure}\n${run.text()}`).toMatchObject({
      role: "feeder",
      action: "s3:PutObject",
    });
    expect(result.denials[0]?.resource).toMatch(
      /^arn:aws:s3:::agentrlstores-storestrajectories[a-z0-9-]+\/feeder\/rehearsal\/cursor\.json$/,
    );
    expect(result.failure).toMatch(/role feeder was denied s3:PutObject on arn:aws:s3:::.*\/feeder\//);
  }, 400_000);

  it("fails naming the dead-letter queue when a consumer may not dead-letter its poison message", async () => {
    const run = logged();
    const result = await rehearse({
      templates: templates(),
      dropGrant: { roleKey: "rollout", action: "sqs:SendMessage", resource: /-rollout-requests-dlq$/ },
      log: run.log,
    });
    expect(result.passed).toBe(false);
    expect(result.denials[0], `${result.failure}\n${run.text()}`).toEqual({
      role: "rollout",
      action: "sqs:SendMessage",
      resource: "arn:aws:sqs:us-east-1:123456789012:rehearsal-rollout-requests-dlq",
    });
    expect(result.failure).toMatch(/role rollout was denied sqs:SendMessage on .*rehearsal-rollout-requests-dlq/);
  }, 400_000);
});

describe("deploy rehearsal stopped mid-way (a SIGTERM to npm run rehearse)", () => {
  it("fails as stopped and stops every role it started, each on SIGTERM", async () => {
    const stop = new AbortController();
    const lines: string[] = [];
    const result = await leavingNoTempFiles(() =>
      rehearse({
        templates: templates(),
        signal: stop.signal,
        log: (line) => {
          lines.push(line);
          // every role is up: stop the run before the trainer's first step
          if (line.startsWith("started ")) stop.abort("SIGTERM");
        },
      }),
    );
    expect(result.failure, lines.join("\n")).toBe("stopped by SIGTERM");
    expect(result.passed).toBe(false);
    expect(Object.keys(result.stops).sort()).toEqual(
      ["controller", "env:db", "feeder", "policy:current", "policy:stale", "rollout", "trainer"].sort(),
    );
    for (const [key, stop] of Object.entries(result.stops)) expect(stop.exitCode, key).toBe(0);
  }, 400_000);

  it("stopped before it starts, starts nothing", async () => {
    await expect(
      rehearse({ templates: templates(), signal: AbortSignal.abort("SIGINT"), log: () => {} }),
    ).rejects.toThrow();
  }, 120_000);
});
