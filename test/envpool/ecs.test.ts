import { execFileSync } from "node:child_process";
import {
  CreateClusterCommand,
  DescribeTasksCommand,
  ECSClient,
  RegisterTaskDefinitionCommand,
  type RegisterTaskDefinitionCommandInput,
} from "@aws-sdk/client-ecs";
import { Template } from "aws-cdk-lib/assertions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import { type EcsCalls, EcsDriver, sdkEcsCalls } from "../../functions/envpool/ecsDriver.ts";
import { PoolManager } from "../../functions/envpool/manager.ts";
import { buildAgentRlApp } from "../../infra/agentRlApp.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { createLogger } from "../../shared/log.ts";
import { REPOSITORY_ROOT, testApp } from "../infra/synth.ts";
import { SYNC_TIMEOUT_MS } from "../support/cli.ts";
import { type MotoServer, startMoto } from "../support/moto.ts";

/**
 * The ECS driver against moto's ECS (state only: no container runs), with the env task
 * definition that infra/ synthesizes registered; throttling through an injected client.
 */
const log = createLogger({ role: "envpool-ecs-test" });
const CLUSTER = "agentrl-test";
let moto: MotoServer;
let ecs: ECSClient;
let family: string;
let network: { subnet: string; group: string };

/**
 * A VPC (DNS hostnames on, as infra's VPC has), subnet and security group in moto's EC2: moto
 * places awsvpc tasks on a real ENI of that subnet. Made with boto3 (moto's own dependency), as
 * the project has no EC2 client.
 */
function motoNetwork(endpoint: string): { subnet: string; group: string } {
  const script = `
import boto3, json
ec2 = boto3.client("ec2", endpoint_url="${endpoint}", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
group = ec2.create_security_group(GroupName="env-workers", Description="env", VpcId=vpc)["GroupId"]
print(json.dumps({"subnet": subnet, "group": group}))`;
  return JSON.parse(execFileSync("python3", ["-c", script], { encoding: "utf8", timeout: SYNC_TIMEOUT_MS })) as {
    subnet: string;
    group: string;
  };
}

type CfnContainer = {
  Name: string;
  Command?: string[];
  Environment?: Array<{ Name: string; Value: unknown }>;
  PortMappings?: Array<{ ContainerPort: number; Protocol?: string }>;
};

/** The synthesized env task definition of `task` as a RegisterTaskDefinition input (deploy-time tokens as placeholders). */
function envTaskDefinition(task: string): RegisterTaskDefinitionCommandInput {
  const config = parseConfig({ tasks: { mix: [{ name: task }] } });
  const stacks = buildAgentRlApp(testApp(), { config, repositoryRoot: REPOSITORY_ROOT });
  const resources = Template.fromStack(stacks.compute).toJSON().Resources as Record<
    string,
    { Type: string; Properties: Record<string, unknown> }
  >;
  for (const resource of Object.values(resources)) {
    if (resource.Type !== "AWS::ECS::TaskDefinition") continue;
    const [container] = resource.Properties.ContainerDefinitions as CfnContainer[];
    const env = new Map((container?.Environment ?? []).map((e) => [e.Name, e.Value]));
    if (!container || env.get("AGENTRL_ROLE") !== "env" || env.get("AGENTRL_TASK") !== task) continue;
    const literal = (value: unknown) => (typeof value === "string" ? value : "deploy-time-value");
    return {
      family: String(resource.Properties.Family),
      networkMode: "awsvpc",
      requiresCompatibilities: ["FARGATE"],
      cpu: String(resource.Properties.Cpu),
      memory: String(resource.Properties.Memory),
      taskRoleArn: "arn:aws:iam::123456789012:role/env-task",
      executionRoleArn: "arn:aws:iam::123456789012:role/env-execution",
      containerDefinitions: [
        {
          name: container.Name,
          image: "agentrl-env:test",
          // moto sums container-level memory to place a task; the synthesized one sets it per task.
          memory: Number(resource.Properties.Memory),
          ...(container.Command ? { command: container.Command } : {}),
          environment: [...env].map(([name, value]) => ({ name, value: literal(value) })),
          portMappings: (container.PortMappings ?? []).map((p) => ({ containerPort: p.ContainerPort })),
        },
      ],
    };
  }
  throw new Error(`no synthesized env task definition for ${task}`);
}

function driver(overrides: { experimentId?: string; calls?: EcsCalls } = {}): EcsDriver {
  return new EcsDriver({
    ecs: overrides.calls ?? sdkEcsCalls(ecs),
    cluster: CLUSTER,
    taskDefinition: family,
    subnets: [network.subnet],
    securityGroups: [network.group],
    capacityProvider: "FARGATE",
    experimentId: overrides.experimentId ?? "exp-a",
    task: "os",
    backoff: { baseMs: 1 },
    log,
  });
}

beforeAll(async () => {
  const [server, definition] = await Promise.all([startMoto(), Promise.resolve().then(() => envTaskDefinition("os"))]);
  moto = server;
  network = motoNetwork(moto.endpoint);
  // moto advances a task one lifecycle state per DescribeTasks (RUNNING, DEACTIVATING, ... STOPPED),
  // which would look like every worker dying; keep them RUNNING until stopped.
  const transition = await fetch(`${moto.endpoint}/moto-api/state-manager/set-transition`, {
    method: "POST",
    body: JSON.stringify({ model_name: "ecs::task", transition: { progression: "manual", times: 1_000_000 } }),
  });
  expect(transition.ok).toBe(true);
  ecs = new ECSClient({ endpoint: moto.endpoint, maxAttempts: 1 });
  await ecs.send(new CreateClusterCommand({ clusterName: CLUSTER }));
  const registered = await ecs.send(new RegisterTaskDefinitionCommand(definition));
  family = registered.taskDefinition?.family ?? "";
}, 120_000);
afterAll(async () => {
  ecs?.destroy();
  await moto?.stop();
});

describe("ECS driver on moto", () => {
  it("runs the synthesized env task definition tagged by experiment and task, lists and stops it", async () => {
    const a = driver();
    const launched = await a.launch({ concurrency: 1, maxEpisodes: 1 });
    expect(launched.id).toMatch(/^arn:aws:ecs:.*:task\//);
    const [described] =
      (await ecs.send(new DescribeTasksCommand({ cluster: CLUSTER, tasks: [launched.id], include: ["TAGS"] }))).tasks ??
      [];
    expect(described?.taskDefinitionArn).toContain(`task-definition/${family}:`);
    expect(described?.tags).toEqual(
      expect.arrayContaining([
        { key: "agentrl:experiment", value: "exp-a" },
        { key: "agentrl:task", value: "os" },
      ]),
    );
    // The reuse limits travel to the container's launcher as role arguments.
    expect(described?.overrides?.containerOverrides?.[0]?.command).toEqual([
      "node",
      "bin/agentrl.mjs",
      "container",
      "--",
      "--concurrency",
      "1",
      "--max-episodes",
      "1",
    ]);

    // Another experiment's pool never sees (or stops) this task.
    const other = driver({ experimentId: "exp-b" });
    const otherTask = await other.launch({ concurrency: 4 });
    expect((await a.list()).map((w) => w.id)).toEqual([launched.id]);
    expect((await other.list()).map((w) => w.id)).toEqual([otherTask.id]);

    await a.stop(launched.id, "drained: no session left");
    expect(await a.list()).toEqual([]);
    expect((await other.list()).map((w) => w.id)).toEqual([otherTask.id]);
    await other.stop(otherTask.id, "test done");
  });

  it("answers a refused RunTask with a clear error, without retrying it", async () => {
    const calls = sdkEcsCalls(ecs);
    let runs = 0;
    const counting: EcsCalls = {
      ...calls,
      runTask: (input) => {
        runs += 1;
        return calls.runTask(input);
      },
    };
    const broken = new EcsDriver({
      ecs: counting,
      cluster: CLUSTER,
      taskDefinition: "no-such-family",
      subnets: [network.subnet],
      securityGroups: [],
      experimentId: "exp-a",
      task: "os",
      log,
    });
    await expect(broken.launch({ concurrency: 1 })).rejects.toThrow();
    expect(runs).toBe(1);
  });

  it("retries throttled calls with growing backoff, and gives up after the last attempt", async () => {
    const calls = sdkEcsCalls(ecs);
    const throttle = () => Object.assign(new Error("Rate exceeded"), { name: "ThrottlingException" });
    let listCalls = 0;
    let runCalls = 0;
    const flaky: EcsCalls = {
      ...calls,
      listTasks: async (input) => {
        listCalls += 1;
        if (listCalls <= 3) throw throttle();
        return calls.listTasks(input);
      },
      runTask: async () => {
        runCalls += 1;
        throw throttle();
      },
    };
    const delays: number[] = [];
    const d = new EcsDriver({
      ecs: flaky,
      cluster: CLUSTER,
      taskDefinition: family,
      subnets: [network.subnet],
      securityGroups: [],
      experimentId: "exp-throttle",
      task: "os",
      backoff: { attempts: 5, baseMs: 100, maxMs: 1_000, random: () => 1, sleep: async (ms) => void delays.push(ms) },
      log,
    });
    expect(await d.list()).toEqual([]);
    expect(listCalls).toBe(4);
    expect(delays).toEqual([100, 200, 400]);
    delays.length = 0;
    await expect(d.launch({ concurrency: 1 })).rejects.toThrow("Rate exceeded");
    expect(runCalls).toBe(5);
    expect(delays).toEqual([100, 200, 400, 800]);
  });

  it("asks for Fargate Spot through the capacity-provider strategy", async () => {
    const calls = sdkEcsCalls(ecs);
    const inputs: unknown[] = [];
    const spot = new EcsDriver({
      ecs: {
        ...calls,
        runTask: async (input) => {
          inputs.push(input);
          return { tasks: [{ taskArn: "arn:aws:ecs:x:1:task/c/1" }], $metadata: {} };
        },
      },
      cluster: CLUSTER,
      taskDefinition: family,
      subnets: [network.subnet],
      securityGroups: [network.group],
      capacityProvider: "FARGATE_SPOT",
      experimentId: "exp-a",
      task: "os",
      log,
    });
    await spot.launch({ concurrency: 2 });
    expect(inputs[0]).toMatchObject({
      capacityProviderStrategy: [{ capacityProvider: "FARGATE_SPOT", weight: 1 }],
      networkConfiguration: { awsvpcConfiguration: { subnets: [network.subnet], securityGroups: [network.group] } },
    });
    expect(inputs[0]).not.toHaveProperty("launchType");
  });

  it("launches on a named EC2 capacity provider (the OS tasks' sandbox hosts) through the strategy", async () => {
    const inputs: unknown[] = [];
    const onHosts = new EcsDriver({
      ecs: {
        ...sdkEcsCalls(ecs),
        runTask: async (input) => {
          inputs.push(input);
          return { tasks: [{ taskArn: "arn:aws:ecs:x:1:task/c/2" }], $metadata: {} };
        },
      },
      cluster: CLUSTER,
      taskDefinition: family,
      subnets: [network.subnet],
      securityGroups: [network.group],
      capacityProvider: "AgentRlCompute-OsSandboxHostsCapacity1A2B3C",
      experimentId: "exp-a",
      task: "os-std",
      log,
    });
    await onHosts.launch({ concurrency: 4 });
    expect(inputs[0]).toMatchObject({
      capacityProviderStrategy: [{ capacityProvider: "AgentRlCompute-OsSandboxHostsCapacity1A2B3C", weight: 1 }],
      networkConfiguration: { awsvpcConfiguration: { subnets: [network.subnet], securityGroups: [network.group] } },
    });
    expect(inputs[0]).not.toHaveProperty("launchType");
  });

  it("lets a restarted pool manager adopt the tasks ListTasks reports instead of launching more", async () => {
    const controller: RunningController = await startController({ port: 0, log });
    const options = {
      task: "os",
      controllerUrl: controller.url,
      minWorkers: 2,
      maxWorkers: 3,
      concurrency: 4,
      log,
    };
    const first = new PoolManager({ ...options, driver: driver({ experimentId: "exp-adopt" }) });
    const second = new PoolManager({ ...options, driver: driver({ experimentId: "exp-adopt" }) });
    try {
      await first.tick();
      expect(first.status().counters.launches).toBe(2);
      // moto runs no container, so the tasks never register: they stay "starting" at the controller.
      await first.close({ stopWorkers: false });
      await second.tick();
      expect(second.status().counters.launches).toBe(0);
      expect(second.status().workers.starting).toBe(2);
    } finally {
      await second.close();
      await controller.close();
    }
    expect(await driver({ experimentId: "exp-adopt" }).list()).toEqual([]);
  });
});
