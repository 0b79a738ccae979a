import { describe, expect, it } from "vitest";
import { type RehearsalTemplates, rehearse, synthesizeForRehearsal } from "../../infra/rehearse/rehearse.ts";

/**
 * The deploy rehearsal (infra/rehearse/rehearse.ts, `npm run rehearse`): the stacks deployed into
 * moto with IAM enforced, one IAM user per task role with exactly the synthesized statements, v0
 * published as the README says, every role its own process through `agentrl container`.
 */
// The SDK's Node 20 notice would only clutter the output (as in test/support/moto.ts).
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

describe("deploy rehearsal under enforced IAM", () => {
  let templates: RehearsalTemplates;

  it("runs every role with its own task role's permissions until the trainer publishes v1 and v2", async () => {
    templates = synthesizeForRehearsal();
    const result = await rehearse({ templates, log: () => {} });
    expect(result.failure).toBe("");
    expect(result.denials).toEqual([]);
    expect(result.versions).toEqual([0, 1, 2]);
    // Every grant was the only one permitting some request of the run (dropping it fails the run),
    // or serves a failure path the run did not meet, for a stated reason.
    expect(result.unneededGrants.filter((g) => g.reason === undefined)).toEqual([]);
    expect(result.unneededGrants.length).toBeLessThan(30);
    expect(result.passed).toBe(true);
  }, 400_000);

  it("fails naming role, action and resource when one needed grant is removed", async () => {
    const result = await rehearse({
      templates: templates ?? synthesizeForRehearsal(),
      dropGrant: { roleKey: "feeder", action: "s3:PutObject", resource: /\/feeder\/\*$/ },
      log: () => {},
    });
    expect(result.passed).toBe(false);
    expect(result.denials[0]).toMatchObject({ role: "feeder", action: "s3:PutObject" });
    expect(result.denials[0]?.resource).toMatch(
      /^arn:aws:s3:::agentrlstores-storestrajectories[a-z0-9-]+\/feeder\/rehearsal\/cursor\.json$/,
    );
    expect(result.failure).toMatch(/role feeder was denied s3:PutObject on arn:aws:s3:::.*\/feeder\//);
  }, 400_000);
});
