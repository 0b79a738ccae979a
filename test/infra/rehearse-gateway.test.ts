import { describe, expect, it } from "vitest";
import { REHEARSAL_GATEWAY_CONFIG, rehearse, synthesizeForRehearsal } from "../../infra/rehearse/rehearse.ts";

/**
 * The deploy rehearsal with `gateway.port` set: the gateway runs as its own role under its task
 * role's IAM user, serves one agent session (chat completion through the deployed policy server,
 * reward, end) and exports it, and every grant of its role-access row is needed by some request.
 */
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";

describe("deploy rehearsal with the gateway", () => {
  it("runs the gateway with exactly its row's grants, all of them used", async () => {
    const lines: string[] = [];
    // the run's own lines say what happened when it fails
    const report = () => lines.join("\n");
    const result = await rehearse({
      templates: synthesizeForRehearsal(REHEARSAL_GATEWAY_CONFIG),
      log: (l) => lines.push(l),
    });
    expect(result.failure, report()).toBe("");
    expect(result.denials).toEqual([]);
    expect(result.versions).toEqual([0, 1, 2, 3]);
    expect(lines.join("\n")).toMatch(
      /gateway session gs-\S+ \(after \d+ 429s\): released, trajectories \["gs-\S+-seg0"\]/,
    );
    expect(result.readySeconds.gateway).toBeGreaterThan(0);
    // no gateway grant went unused (the trainer's ListBucket is the one known exception, see rehearse.test.ts)
    expect(result.unneededGrants.filter((g) => g.role === "gateway")).toEqual([]);
    expect(result.stops.gateway?.exitCode).toBe(0);
  }, 600_000);
});
