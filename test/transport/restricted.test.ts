import { describe, expect, it } from "vitest";
import { parseConfig } from "../../shared/config/index.ts";
import { ROLE_ACCESS } from "../../shared/config/roleAccess.ts";
import { createRoleTransport, createTransport } from "../../shared/transport/index.ts";
import { type RoleAccessError, restrictTransport } from "../../shared/transport/restricted.ts";
import { tempDir } from "../support/tmp.ts";

describe("a role's Transport view restricted to its row of the role-access table", () => {
  it("lets the feeder do what its row says and refuses the rest, naming role, operation and resource", async () => {
    const inner = await createTransport(
      parseConfig({ transport: { localDir: tempDir("agentrl-restricted-") } }).transport,
    );
    const refused: RoleAccessError[] = [];
    const feeder = restrictTransport(inner, "feeder", { onViolation: (error) => refused.push(error) });
    try {
      await feeder.queue("rollout-requests").send("{}");
      expect((await feeder.queue("trajectories").approximateDepth()).visible).toBe(0);
      await feeder.store("trajectories").put("feeder/e/cursor.json", "{}");
      expect(await feeder.store("trajectories").getText("feeder/e/cursor.json")).toBe("{}");

      await expect(feeder.queue("trajectories").send("{}")).rejects.toThrow(
        "role feeder may not send to (produce) queue trajectories",
      );
      await expect(feeder.queue("rollout-requests").receive()).rejects.toThrow(/may not receive from \(consume\)/);
      await expect(feeder.store("trajectories").put("trajectories/e/g/t.json", "{}")).rejects.toThrow(
        "role feeder may not put (write) trajectories store key trajectories/e/g/t.json",
      );
      await expect(feeder.store("checkpoints").list("policies/")).rejects.toThrow(/may not list \(read\) checkpoints/);
      await expect(feeder.store("trajectories").delete("feeder/e/cursor.json")).rejects.toThrow(/may not delete/);
      await expect(feeder.tidy()).rejects.toThrow(/role feeder may not tidy/); // the run's owner tidies, no role
      // reported even when a caller swallows the rejection
      expect(refused.map((e) => e.role)).toEqual(["feeder", "feeder", "feeder", "feeder", "feeder", "feeder"]);
    } finally {
      await feeder.close();
    }
  });

  it("createRoleTransport leaves out the rows of features the experiment does not use, as infra's grants do", async () => {
    const localDir = tempDir("agentrl-role-features-");
    const plain = parseConfig({ transport: { localDir } });
    const synced = parseConfig({
      transport: { localDir },
      policy: {
        exportHf: true,
        syncEngines: [{ id: "vllm-0", url: "http://vllm:8000", dialect: "vllm", modelDir: "/models/m" }],
      },
      rollout: { versionSource: "sync", syncEngine: "vllm-0" },
    });
    await (await createTransport(plain.transport)).close(); // the orchestrator creates the resources
    const without = await createRoleTransport(plain, "rollout");
    const withSync = await createRoleTransport(synced, "rollout");
    try {
      await expect(without.store("checkpoints").getText("engines/vllm-0.json")).rejects.toThrow(
        "role rollout may not get (read) checkpoints store key engines/vllm-0.json",
      );
      expect(await withSync.store("checkpoints").getText("engines/vllm-0.json")).toBeUndefined();
      // the rows every experiment uses stay
      expect(await without.store("checkpoints").list("policies/")).toEqual([]);
    } finally {
      await without.close();
      await withSync.close();
    }
  });

  it("gives the roles that touch no queue or store nothing at all", () => {
    for (const role of ["controller", "env"] as const) expect(ROLE_ACCESS[role]).toEqual({ queues: {}, stores: [] });
  });
});
