import type { Template } from "aws-cdk-lib/assertions";
import { beforeAll, describe, expect, it } from "vitest";
import { GATEWAY_PORT, METRICS_PORT } from "../../infra/stacks/computeStack.ts";
import { ContainerEnv } from "../../shared/config/containerEnv.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { permissionsOf, ROLE_ACCESS } from "../../shared/config/roleAccess.ts";
import { type CollectingNagLogger, synthAgentRl } from "./synth.ts";

/** `gateway.port` in the config deploys the gateway as an ECS service under the same secrets model and role-access table. */

type Resource = { Type: string; Properties: Record<string, unknown> };
type Container = {
  Environment?: Array<{ Name: string; Value: unknown }>;
  Secrets?: Array<{ Name: string; ValueFrom: unknown }>;
  PortMappings?: Array<{ ContainerPort: number }>;
};

const withGateway = { gateway: { port: 0 } };
let compute: Template;
let without: Template;
let nag: CollectingNagLogger;

beforeAll(() => {
  const synth = synthAgentRl({ config: withGateway });
  compute = synth.templates.compute;
  nag = synth.nag;
  without = synthAgentRl().templates.compute;
}, 240_000);

const resources = (template: Template) => Object.entries(template.toJSON().Resources as Record<string, Resource>);

function gatewayTask(template: Template): { id: string; container: Container } | undefined {
  for (const [id, r] of resources(template)) {
    if (r.Type !== "AWS::ECS::TaskDefinition") continue;
    const container = (r.Properties.ContainerDefinitions as Container[])[0] as Container;
    if (container.Environment?.some((e) => e.Name === "AGENTRL_ROLE" && e.Value === "gateway"))
      return { id, container };
  }
  return undefined;
}

describe("gateway in the compute stack", () => {
  it("exists only when gateway.port is set, with an environment the container schema accepts", () => {
    expect(gatewayTask(without)).toBeUndefined();
    const task = gatewayTask(compute);
    expect(task).toBeDefined();
    const env = Object.fromEntries(
      (task?.container.Environment ?? []).map((e) => [e.Name, typeof e.Value === "string" ? e.Value : "deploy-time"]),
    );
    const parsed = ContainerEnv.safeParse(env);
    expect(parsed.success, parsed.error?.message).toBe(true);
    expect(env.AGENTRL_PORT).toBe(String(GATEWAY_PORT));
    expect(env.AGENTRL_POLICY_CURRENT_URL).toMatch(/^http:\/\/policy-current\./);
    // its API port, and /metrics on a port of its own
    expect(task?.container.PortMappings?.map((p) => p.ContainerPort)).toEqual([GATEWAY_PORT, METRICS_PORT]);
    expect(JSON.parse(env.AGENTRL_CONFIG_JSON as string)).toEqual(parseConfig(withGateway));
  });

  it("takes its admin key from Secrets Manager by ARN, and no other role gets it", () => {
    const task = gatewayTask(compute);
    expect(task?.container.Secrets?.map((s) => s.Name).sort()).toEqual([
      "AGENTRL_GATEWAY_ADMIN_KEY",
      "AGENTRL_METRICS_TOKEN",
      "AGENTRL_POLICY_API_KEY",
    ]);
    for (const secret of task?.container.Secrets ?? []) expect(JSON.stringify(secret.ValueFrom)).toMatch(/Ref/);
    expect(task?.container.Environment?.map((e) => e.Name).filter((n) => /SECRET|KEY/.test(n))).toEqual([]);
    const holders = resources(compute)
      .filter(([, r]) => r.Type === "AWS::ECS::TaskDefinition")
      .filter(([, r]) =>
        (r.Properties.ContainerDefinitions as Container[]).some((c) =>
          c.Secrets?.some((s) => s.Name === "AGENTRL_GATEWAY_ADMIN_KEY"),
        ),
      );
    expect(holders.map(([id]) => id)).toEqual([task?.id]);
    const secrets = resources(compute).filter(([, r]) => r.Type === "AWS::SecretsManager::Secret");
    expect(secrets).toHaveLength(5); // env, controller, policy, metrics, gateway admin
    for (const [, secret] of secrets) expect(secret.Properties.SecretString).toBeUndefined();
  });

  it("runs one task (sessions live in memory), registered in Cloud Map, and passes cdk-nag", () => {
    const task = gatewayTask(compute);
    const service = resources(compute).find(
      ([, r]) =>
        r.Type === "AWS::ECS::Service" && JSON.stringify(r.Properties.TaskDefinition).includes(task?.id as string),
    )?.[1];
    expect(service?.Properties.DesiredCount).toBe(1);
    expect(service?.Properties.DeploymentConfiguration).toMatchObject({
      MaximumPercent: 100,
      MinimumHealthyPercent: 0,
    });
    expect(
      resources(compute).some(
        ([, r]) => r.Type === "AWS::ServiceDiscovery::Service" && r.Properties.Name === "gateway",
      ),
    ).toBe(true);
    expect(nag.unsuppressed).toEqual([]);
  });

  it("grants the gateway its row of the role-access table: write trajectories, announce them, read queue depths and policies", () => {
    const permissions = permissionsOf(ROLE_ACCESS.gateway).map((p) => `${p.action} ${p.resource}`);
    expect(permissions).toEqual(
      expect.arrayContaining([
        "s3:PutObject object:trajectories/trajectories/*",
        "sqs:SendMessage queue:trajectories",
        "sqs:GetQueueAttributes queue:trajectories",
        "sqs:GetQueueAttributes queue:rollout-requests",
        "s3:GetObject object:checkpoints/policies/*",
      ]),
    );
    // it never consumes a queue, never reads a trajectory back, never touches the feeder's cursor
    expect(permissions.filter((p) => /ReceiveMessage|DeleteMessage/.test(p))).toEqual([]);
    expect(permissions).not.toContain("s3:GetObject object:trajectories/trajectories/*");
    expect(permissions.filter((p) => p.includes("feeder/"))).toEqual([]);
  });
});
