import { beforeAll, describe, expect, it } from "vitest";
import { MYSQL_SIDECAR_IMAGE } from "../../infra/constructs/mysqlSidecar.ts";
import { taskRoleDefinitions } from "../../infra/rehearse/template.ts";
import { ContainerEnv } from "../../shared/config/containerEnv.ts";
import { type CollectingNagLogger, synthAgentRl } from "./synth.ts";

/**
 * DBBench's env workers on ECS: each task carries a pinned MySQL 8 sidecar reachable on the
 * task's loopback only, whose root password comes from Secrets Manager; the rehearsal's template
 * reader sees it as the worker's sidecar.
 */
interface Container {
  Name: string;
  Image: unknown;
  Command?: string[];
  Environment?: Array<{ Name: string; Value: unknown }>;
  Secrets?: Array<{ Name: string; ValueFrom: unknown }>;
  PortMappings?: unknown[];
  DependsOn?: Array<{ ContainerName: string; Condition: string }>;
  Essential?: boolean;
  HealthCheck?: { Command: string[] };
}

let compute: Record<string, { Type: string; Properties: Record<string, unknown> }>;
let nag: CollectingNagLogger;
beforeAll(() => {
  const synth = synthAgentRl({
    config: { tasks: { mix: [{ name: "db" }, { name: "dbbench-std" }, { name: "dbbench-dev" }] } },
  });
  compute = synth.templates.compute.toJSON().Resources;
  nag = synth.nag;
}, 120_000);

function containersOf(task: string): Container[] {
  const definition = Object.values(compute).find(
    (r) =>
      r.Type === "AWS::ECS::TaskDefinition" &&
      (r.Properties.ContainerDefinitions as Container[]).some((c) =>
        (c.Environment ?? []).some(
          (e) =>
            e.Name === "AGENTRL_TASK" &&
            e.Value === task &&
            (c.Environment ?? []).some((x) => x.Name === "AGENTRL_ROLE" && x.Value === "env"),
        ),
      ),
  );
  if (!definition) throw new Error(`no env task definition for ${task}`);
  return definition.Properties.ContainerDefinitions as Container[];
}

describe("the dbbench env tasks' MySQL sidecar", () => {
  it("runs a pinned MySQL 8 on the task's loopback only, started before the worker", () => {
    for (const task of ["dbbench-std", "dbbench-dev"]) {
      const [worker, mysql, ...rest] = containersOf(task);
      expect(rest).toEqual([]);
      expect(mysql?.Image).toBe(MYSQL_SIDECAR_IMAGE);
      expect(MYSQL_SIDECAR_IMAGE).toMatch(/:8\.0\.\d+$/);
      expect(mysql?.Essential).toBe(true);
      expect(mysql?.PortMappings ?? []).toEqual([]);
      expect(mysql?.Command).toContain("--bind-address=127.0.0.1");
      expect(mysql?.HealthCheck?.Command.join(" ")).toMatch(/mysqladmin ping/);
      expect(worker?.DependsOn).toEqual([{ ContainerName: mysql?.Name, Condition: "HEALTHY" }]);
      const env = Object.fromEntries((worker?.Environment ?? []).map((e) => [e.Name, e.Value]));
      expect(env.AGENTRL_MYSQL_URL).toBe("mysql://root@127.0.0.1:3306/");
      // The same root password reaches both, by ARN, never as a value.
      const workerSecret = worker?.Secrets?.find((s) => s.Name === "AGENTRL_MYSQL_PASSWORD");
      const mysqlSecret = mysql?.Secrets?.find((s) => s.Name === "MYSQL_ROOT_PASSWORD");
      expect(workerSecret).toBeDefined();
      expect(JSON.stringify(workerSecret?.ValueFrom)).toBe(JSON.stringify(mysqlSecret?.ValueFrom));
      expect(JSON.stringify(mysqlSecret?.ValueFrom)).toMatch(/Ref/);
      expect(
        ContainerEnv.safeParse({ ...env, AGENTRL_CONFIG_JSON: "{}" }).error?.issues.map((i) => i.path.join(".")),
      ).not.toContain("AGENTRL_MYSQL_URL");
    }
  });

  it("leaves other tasks with their one container, makes one secret for both dbbench tasks, and passes cdk-nag", () => {
    expect(containersOf("db")).toHaveLength(1);
    const secrets = Object.values(compute).filter((r) => r.Type === "AWS::SecretsManager::Secret");
    expect(secrets).toHaveLength(5); // env, controller, policy, metrics, MySQL
    expect(nag.unsuppressed).toEqual([]);
  });

  it("is read by the rehearsal's template reader as the worker's sidecar", () => {
    const definitions = taskRoleDefinitions({ Resources: compute } as Parameters<typeof taskRoleDefinitions>[0]);
    const worker = definitions.find((d) => d.key === "env:dbbench-std");
    expect(worker?.role).toBe("env");
    expect(worker?.sidecars).toEqual([
      { name: expect.stringMatching(/Mysql/), image: MYSQL_SIDECAR_IMAGE, portMappings: [] },
    ]);
    expect(definitions.find((d) => d.key === "env:db")?.sidecars).toEqual([]);
  });
});
