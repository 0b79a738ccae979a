import { beforeAll, describe, expect, it } from "vitest";
import { AGENTBENCH_OS_DOCKERFILE, RoleImages } from "../../infra/constructs/images.ts";
import { DOCKER_SOCKET, sandboxWorkerReservation } from "../../infra/constructs/osSandbox.ts";
import { SANDBOX_AGENT_CONFIG } from "../../infra/constructs/sandboxHosts.ts";
import { ContainerEnv } from "../../shared/config/containerEnv.ts";
import { type CollectingNagLogger, synthAgentRl } from "./synth.ts";

/**
 * AgentBench's OS tasks on ECS: their env workers run on EC2 sandbox hosts of their own and start
 * each episode's container on the host's Docker through its socket (Fargate cannot start a
 * container from a task). The default stacks make none of it; cdk-nag finds nothing unsuppressed.
 */
type Resources = Record<string, { Type: string; Properties: Record<string, unknown> }>;
interface Container {
  Name: string;
  Image: unknown;
  Essential?: boolean;
  EntryPoint?: string[];
  Environment?: Array<{ Name: string; Value: unknown }>;
  MountPoints?: Array<{ SourceVolume: string; ContainerPath: string; ReadOnly: boolean }>;
  DependsOn?: Array<{ ContainerName: string; Condition: string }>;
  Privileged?: boolean;
  Cpu?: number;
  MemoryReservation?: number;
}

let withOs: { resources: Resources; parameters: Record<string, unknown>; nag: CollectingNagLogger; images: RoleImages };
let plain: { resources: Resources; parameters: Record<string, unknown> };

beforeAll(() => {
  const os = synthAgentRl({
    config: { tasks: { mix: [{ name: "os" }, { name: "os-std", concurrency: 12 }, { name: "os-dev" }] } },
  });
  const template = os.templates.compute.toJSON();
  withOs = {
    resources: template.Resources,
    parameters: template.Parameters,
    nag: os.nag,
    images: os.stacks.compute.images,
  };
  const defaults = synthAgentRl().templates.compute.toJSON();
  plain = { resources: defaults.Resources, parameters: defaults.Parameters };
}, 240_000);

const ofType = (resources: Resources, type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);

const envOf = (container: Container | undefined) =>
  Object.fromEntries((container?.Environment ?? []).map((e) => [e.Name, e.Value]));

/** The task definition whose first container has AGENTRL_ROLE=role and AGENTRL_TASK=task. */
function taskDefinition(resources: Resources, role: string, task: string) {
  const found = ofType(resources, "AWS::ECS::TaskDefinition").find(([, r]) => {
    const env = envOf((r.Properties.ContainerDefinitions as Container[])[0]);
    return env.AGENTRL_ROLE === role && env.AGENTRL_TASK === task;
  });
  if (!found) throw new Error(`no ${role} task definition for ${task}`);
  return found[1].Properties;
}

describe("the AgentBench OS tasks' env workers on ECS", () => {
  it("run on EC2 in awsvpc mode with the host's Docker socket, never privileged", () => {
    for (const task of ["os-std", "os-dev"]) {
      const definition = taskDefinition(withOs.resources, "env", task);
      expect(definition.RequiresCompatibilities).toEqual(["EC2"]);
      expect(definition.NetworkMode).toBe("awsvpc");
      expect(definition.Volumes).toEqual([{ Name: "docker-socket", Host: { SourcePath: DOCKER_SOCKET } }]);
      const [worker] = definition.ContainerDefinitions as Container[];
      expect(worker?.MountPoints).toEqual([
        { SourceVolume: "docker-socket", ContainerPath: DOCKER_SOCKET, ReadOnly: false },
      ]);
      expect(envOf(worker).AGENTRL_CONTAINER_ENGINE).toBe("docker");
      for (const container of definition.ContainerDefinitions as Container[])
        expect(container.Privileged).toBeUndefined();
    }
  });

  it("reserve their episodes' memory, which ECS does not see, so a host is never overpacked", () => {
    const [std] = taskDefinition(withOs.resources, "env", "os-std").ContainerDefinitions as Container[];
    // 12 episodes: 2048 + 12 x 1024 MiB, 1024 + 12 x 256 CPU units.
    expect(std?.MemoryReservation).toBe(14_336);
    expect(std?.Cpu).toBe(4096);
    expect(sandboxWorkerReservation(12)).toEqual({ cpu: 4096, memoryMiB: 14_336 });
    const [dev] = taskDefinition(withOs.resources, "env", "os-dev").ContainerDefinitions as Container[];
    expect(dev?.MemoryReservation).toBe(2048 + 16 * 1024);
  });

  it("pull both episode images with the task and name them to the worker, which waits for them", () => {
    const [worker, ...carriers] = taskDefinition(withOs.resources, "env", "os-std").ContainerDefinitions as Container[];
    expect(carriers.map((c) => c.Name).sort()).toEqual(["OsImage-default", "OsImage-packages"]);
    for (const carrier of carriers) {
      expect(carrier.Essential).toBe(false);
      expect(carrier.EntryPoint).toEqual(["/bin/true"]);
      expect(worker?.DependsOn).toContainEqual({ ContainerName: carrier.Name, Condition: "SUCCESS" });
    }
    const env = envOf(worker);
    const byName = Object.fromEntries(carriers.map((c) => [c.Name, JSON.stringify(c.Image)]));
    expect(JSON.stringify(env.AGENTRL_OS_IMAGE_DEFAULT)).toBe(byName["OsImage-default"]);
    expect(JSON.stringify(env.AGENTRL_OS_IMAGE_PACKAGES)).toBe(byName["OsImage-packages"]);
    expect(byName["OsImage-default"]).not.toBe(byName["OsImage-packages"]);
    expect(withOs.images.builds).toContainEqual({ file: AGENTBENCH_OS_DOCKERFILE, buildArgs: {} });
    expect(withOs.images.builds).toContainEqual({
      file: AGENTBENCH_OS_DOCKERFILE,
      buildArgs: { EXTRA_PACKAGES: "npm" },
    });
    expect(withOs.images.builds).toContainEqual({ file: RoleImages.envDockerfile("os-std"), buildArgs: {} });
    expect(RoleImages.envDockerfile("os-dev")).toBe("env-images/osbench/Dockerfile");
  });

  it("are launched by their pool on the sandbox capacity provider, whose name passes the container schema", () => {
    const provider = ofType(withOs.resources, "AWS::ECS::CapacityProvider").find(([id]) => id.includes("OsSandbox"));
    expect(provider).toBeDefined();
    for (const task of ["os-std", "os-dev"]) {
      const [pool] = taskDefinition(withOs.resources, "envpool", task).ContainerDefinitions as Container[];
      const env = envOf(pool);
      expect(env.AGENTRL_ENV_CAPACITY_PROVIDER).toEqual({ Ref: provider?.[0] });
      // Deploy-time tokens stand in as strings; the provider as CloudFormation names it.
      const resolved = Object.fromEntries(Object.entries(env).map(([k, v]) => [k, typeof v === "string" ? v : "x"]));
      const name = "AgentRlCompute-OsSandboxHostsCapacity1A2B3C";
      expect(ContainerEnv.safeParse({ ...resolved, AGENTRL_ENV_CAPACITY_PROVIDER: name }).success).toBe(true);
      const bad = ContainerEnv.safeParse({ ...resolved, AGENTRL_ENV_CAPACITY_PROVIDER: "spot please" });
      expect(bad.error?.issues.map((i) => `${i.path.join(".")}: ${i.message}`)).toEqual([
        "AGENTRL_ENV_CAPACITY_PROVIDER: must be FARGATE, FARGATE_SPOT or a capacity provider name (1-255 letters, digits, '-' or '_')",
      ]);
    }
    // The synthetic os task stays on Fargate, as in the default stacks.
    const [osPool] = taskDefinition(withOs.resources, "envpool", "os").ContainerDefinitions as Container[];
    expect(envOf(osPool).AGENTRL_ENV_CAPACITY_PROVIDER).toBe("FARGATE");
    expect(taskDefinition(withOs.resources, "env", "os").RequiresCompatibilities).toEqual(["FARGATE"]);
    expect(taskDefinition(withOs.resources, "env", "os").Volumes).toBeUndefined();
  });

  it("get hosts with IMDSv2 at hop limit 1, no privileged tasks, no inbound rule, one group for every OS task", () => {
    const templates = ofType(withOs.resources, "AWS::EC2::LaunchTemplate").filter(([id]) => id.includes("OsSandbox"));
    expect(templates).toHaveLength(1);
    const data = templates[0]?.[1].Properties.LaunchTemplateData as {
      MetadataOptions: Record<string, unknown>;
      UserData: unknown;
      BlockDeviceMappings: Array<{ Ebs: { Encrypted: boolean } }>;
    };
    expect(data.MetadataOptions).toMatchObject({ HttpTokens: "required", HttpPutResponseHopLimit: 1 });
    for (const line of SANDBOX_AGENT_CONFIG) expect(JSON.stringify(data.UserData)).toContain(line);
    expect(data.BlockDeviceMappings[0]?.Ebs.Encrypted).toBe(true);
    const groups = ofType(withOs.resources, "AWS::EC2::SecurityGroup").filter(([id]) => id.includes("OsSandbox"));
    expect(groups).toHaveLength(1);
    expect(groups[0]?.[1].Properties.SecurityGroupIngress).toBeUndefined();
    expect(
      ofType(withOs.resources, "AWS::EC2::SecurityGroupIngress")
        .map(([id]) => id)
        .join(" "),
    ).not.toMatch(/OsSandboxHosts/);
    expect(ofType(withOs.resources, "AWS::AutoScaling::AutoScalingGroup")).toHaveLength(2);
    expect(withOs.parameters.SandboxInstanceType).toMatchObject({ Default: "m6i.2xlarge" });
  });

  it("pass cdk-nag with no unsuppressed finding", () => {
    expect(withOs.nag.unsuppressed).toEqual([]);
    const reasons = withOs.nag.suppressed.filter((s) => s.path.includes("OsSandbox"));
    expect(reasons.length).toBeGreaterThan(0);
    for (const s of reasons) expect(s.reason.length).toBeGreaterThan(40);
  });
});

describe("the default stacks", () => {
  it("make no sandbox hosts, no socket mount and no extra parameter when no os-* task is in the mix", () => {
    expect(plain.parameters.SandboxInstanceType).toBeUndefined();
    expect(ofType(plain.resources, "AWS::AutoScaling::AutoScalingGroup")).toHaveLength(1);
    expect(JSON.stringify(plain.resources)).not.toContain(DOCKER_SOCKET);
    for (const [, definition] of ofType(plain.resources, "AWS::ECS::TaskDefinition"))
      expect(JSON.stringify(definition.Properties)).not.toContain("AGENTRL_CONTAINER_ENGINE");
  });
});
