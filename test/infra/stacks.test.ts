import type { Template } from "aws-cdk-lib/assertions";
import { beforeAll, describe, expect, it } from "vitest";
import { messagingPropsFor } from "../../infra/agentRlApp.ts";
import { CONTAINER_COMMAND } from "../../infra/constructs/roleService.ts";
import {
  type CfnTemplate,
  exportsOf,
  type PolicyStatement,
  resolveIntrinsics,
  taskRoleDefinitions,
} from "../../infra/rehearse/template.ts";
import { METRICS_PORT } from "../../infra/stacks/computeStack.ts";
import { ContainerEnv, type ContainerRole } from "../../shared/config/containerEnv.ts";
import { parseConfig, TASK_NAMES } from "../../shared/config/index.ts";
import { accessFeaturesOf, forFeatures, permissionsOf, ROLE_ACCESS } from "../../shared/config/roleAccess.ts";
import { parseSweepSpec, SweepSpec } from "../../shared/config/sweep.ts";
import { type CollectingNagLogger, synthAgentRl } from "./synth.ts";

type Resource = {
  Type: string;
  Properties: Record<string, unknown>;
  DeletionPolicy?: string;
  UpdateReplacePolicy?: string;
};
type ContainerDefinition = {
  Image?: unknown;
  Environment?: Array<{ Name: string; Value: unknown }>;
  ResourceRequirements?: Array<{ Type: string; Value: string }>;
  Command?: string[];
};

const config = parseConfig({});
const sweep = parseSweepSpec({
  name: "lr",
  schedule: "rate(7 days)",
  base: { trainer: { maxSteps: 5 } },
  grid: { "trainer.learningRate": [0.0001, 0.0003] },
});

/** One synth of the whole app (all four stacks, cdk-nag attached) shared by every test below. */
let templates: Record<"stores" | "messaging" | "compute" | "sweeps", Template>;
let nag: CollectingNagLogger;

beforeAll(() => {
  const synth = synthAgentRl({ sweeps: [sweep] });
  if (!synth.templates.sweeps) throw new Error("sweep stack missing");
  templates = { ...synth.templates, sweeps: synth.templates.sweeps };
  nag = synth.nag;
}, 240_000);

const resourcesOf = (template: Template, type: string): Array<[string, Resource]> =>
  Object.entries(template.findResources(type) as Record<string, Resource>);

/** The task role's policy statements as (actions, resource JSON) pairs. */
function taskRoleStatements(
  template: Template,
  taskDefinitionId: string,
): Array<{ actions: string[]; resources: string[] }> {
  const taskDefinition = template.toJSON().Resources[taskDefinitionId] as Resource;
  const roleId = (taskDefinition.Properties.TaskRoleArn as { "Fn::GetAtt": [string, string] })["Fn::GetAtt"][0];
  return resourcesOf(template, "AWS::IAM::Policy")
    .filter(([, policy]) => JSON.stringify(policy.Properties.Roles) === JSON.stringify([{ Ref: roleId }]))
    .flatMap(
      ([, policy]) =>
        (policy.Properties.PolicyDocument as { Statement: Array<{ Action: string | string[]; Resource: unknown }> })
          .Statement,
    )
    .map((statement) => ({
      actions: [statement.Action].flat(),
      resources: [statement.Resource].flat().map((r) => (typeof r === "string" ? r : JSON.stringify(r))),
    }));
}

/** Task definitions keyed by the AGENTRL_ROLE (and task/pool) their container carries. */
function taskDefinitionsByRole(
  template: Template,
): Map<string, { id: string; container: ContainerDefinition; env: Record<string, string> }> {
  const byRole = new Map<string, { id: string; container: ContainerDefinition; env: Record<string, string> }>();
  for (const [id, resource] of resourcesOf(template, "AWS::ECS::TaskDefinition")) {
    const container = (resource.Properties.ContainerDefinitions as ContainerDefinition[])[0] as ContainerDefinition;
    // Deploy-time values (imported bucket names) stand in as strings; everything else is literal.
    const env = Object.fromEntries(
      (container.Environment ?? []).map((e) => [e.Name, typeof e.Value === "string" ? e.Value : "deploy-time-value"]),
    );
    const key = [env.AGENTRL_ROLE, env.AGENTRL_TASK ?? env.AGENTRL_POLICY_POOL].filter(Boolean).join(":");
    byRole.set(key, { id, container, env });
  }
  return byRole;
}

describe("cdk-nag AwsSolutions", () => {
  it("reports no unsuppressed finding, and every suppression carries a justification", () => {
    expect(nag.unsuppressed).toEqual([]);
    expect(nag.suppressed.length).toBeGreaterThan(0);
    for (const s of nag.suppressed) expect(s.reason.length, `${s.rule} @ ${s.path}`).toBeGreaterThan(40);
  });
});

describe("stores stack", () => {
  it("keeps both data buckets versioned, encrypted, private, TLS-only and retained", () => {
    const buckets = resourcesOf(templates.stores, "AWS::S3::Bucket");
    expect(buckets).toHaveLength(3); // trajectories, checkpoints, access logs
    for (const [, bucket] of buckets) {
      expect(bucket.DeletionPolicy).toBe("Retain");
      expect(bucket.UpdateReplacePolicy).toBe("Retain");
      expect(bucket.Properties.BucketEncryption).toEqual({
        ServerSideEncryptionConfiguration: [{ ServerSideEncryptionByDefault: { SSEAlgorithm: "AES256" } }],
      });
      expect(bucket.Properties.PublicAccessBlockConfiguration).toEqual({
        BlockPublicAcls: true,
        BlockPublicPolicy: true,
        IgnorePublicAcls: true,
        RestrictPublicBuckets: true,
      });
    }
    const data = buckets.filter(([id]) => /^Stores(Trajectories|Checkpoints)/.test(id));
    expect(data).toHaveLength(2);
    for (const [, bucket] of data) {
      expect(bucket.Properties.VersioningConfiguration).toEqual({ Status: "Enabled" });
      expect(bucket.Properties.LoggingConfiguration).toBeDefined();
    }
    // Every bucket policy denies requests that do not use TLS.
    const policies = resourcesOf(templates.stores, "AWS::S3::BucketPolicy");
    expect(policies).toHaveLength(3);
    for (const [, policy] of policies)
      expect(JSON.stringify(policy.Properties.PolicyDocument)).toContain(
        '"Condition":{"Bool":{"aws:SecureTransport":"false"}},"Effect":"Deny"',
      );
  });

  it("expires old trajectories (current and overwritten) but never current checkpoints", () => {
    const [[, trajectories]] = resourcesOf(templates.stores, "AWS::S3::Bucket").filter(([id]) =>
      id.startsWith("StoresTrajectories"),
    ) as [[string, Resource]];
    expect(trajectories.Properties.LifecycleConfiguration).toMatchObject({
      Rules: [{ ExpirationInDays: 30, NoncurrentVersionExpiration: { NoncurrentDays: 7 }, Status: "Enabled" }],
    });
    const [[, checkpoints]] = resourcesOf(templates.stores, "AWS::S3::Bucket").filter(([id]) =>
      id.startsWith("StoresCheckpoints"),
    ) as [[string, Resource]];
    const rules = (checkpoints.Properties.LifecycleConfiguration as { Rules: Array<Record<string, unknown>> }).Rules;
    expect(rules.every((rule) => rule.ExpirationInDays === undefined)).toBe(true);
  });
});

describe("messaging stack", () => {
  const props = messagingPropsFor(config);
  const expected = {
    "agentrl-rollout-requests": props.rolloutRequests.consumerTimeout.toSeconds(),
    "agentrl-trajectories": props.trajectories.consumerTimeout.toSeconds(),
    "agentrl-policy-events": props.policyEvents.consumerTimeout.toSeconds(),
  };

  it("gives every queue an encrypted DLQ with maxReceiveCount from the config", () => {
    const queues = new Map(resourcesOf(templates.messaging, "AWS::SQS::Queue"));
    expect(queues.size).toBe(6);
    for (const name of Object.keys(expected)) {
      const [, queue] = [...queues].find(([, q]) => q.Properties.QueueName === name) as [string, Resource];
      const [dlqId, dlq] = [...queues].find(([, q]) => q.Properties.QueueName === `${name}-dlq`) as [string, Resource];
      expect(queue.Properties.RedrivePolicy).toEqual({
        deadLetterTargetArn: { "Fn::GetAtt": [dlqId, "Arn"] },
        maxReceiveCount: config.transport.maxReceiveCount,
      });
      expect(queue.Properties.SqsManagedSseEnabled).toBe(true);
      expect(dlq.Properties.SqsManagedSseEnabled).toBe(true);
      expect(dlq.Properties.MessageRetentionPeriod).toBe(14 * 24 * 3600);
    }
    for (const [, policy] of resourcesOf(templates.messaging, "AWS::SQS::QueuePolicy"))
      expect(JSON.stringify(policy.Properties.PolicyDocument)).toContain('{"Bool":{"aws:SecureTransport":"false"}}');
    expect(resourcesOf(templates.messaging, "AWS::SQS::QueuePolicy")).toHaveLength(6);
  });

  it("sets visibility timeouts no shorter than their consumers' timeouts", () => {
    for (const [name, consumerSeconds] of Object.entries(expected)) {
      const [, queue] = resourcesOf(templates.messaging, "AWS::SQS::Queue").find(
        ([, q]) => q.Properties.QueueName === name,
      ) as [string, Resource];
      expect(queue.Properties.VisibilityTimeout as number, name).toBeGreaterThanOrEqual(consumerSeconds);
    }
    // The pipeline's consumers hold messages for the config's visibility timeout, exactly.
    expect(expected["agentrl-rollout-requests"]).toBe(config.transport.visibilityTimeoutSeconds);
  });
});

describe("compute stack", () => {
  it("runs every role from the launcher with an environment the container's zod schema accepts", () => {
    const roles = taskDefinitionsByRole(templates.compute);
    expect([...roles.keys()].sort()).toEqual(
      [
        "controller",
        "feeder",
        "rollout",
        "trainer",
        "policy:current",
        "policy:stale",
        ...TASK_NAMES.map((task) => `env:${task}`),
        ...TASK_NAMES.map((task) => `envpool:${task}`),
      ].sort(),
    );
    for (const [key, { container, env }] of roles) {
      expect(container.Command, key).toEqual(CONTAINER_COMMAND);
      const parsed = ContainerEnv.safeParse(env);
      expect(parsed.success, `${key}: ${parsed.error?.message}`).toBe(true);
      expect(JSON.parse(env.AGENTRL_CONFIG_JSON as string)).toEqual(config);
    }
  });

  it("injects the shared secrets from Secrets Manager by ARN: no secret value or secret variable in any template", () => {
    const resources = templates.compute.toJSON().Resources as Record<string, Resource>;
    const secrets = Object.entries(resources).filter(([, r]) => r.Type === "AWS::SecretsManager::Secret");
    expect(secrets).toHaveLength(4); // env, controller, policy, metrics
    for (const [, secret] of secrets) {
      expect(secret.Properties.GenerateSecretString).toBeDefined();
      expect(secret.Properties.SecretString).toBeUndefined();
    }
    // every role also holds the scrape token of its /metrics
    const expected: Record<string, string[]> = {
      controller: ["AGENTRL_CONTROLLER_SECRET", "AGENTRL_ENV_SECRET", "AGENTRL_METRICS_TOKEN"],
      "env:db": ["AGENTRL_ENV_SECRET", "AGENTRL_METRICS_TOKEN"],
      "envpool:db": ["AGENTRL_CONTROLLER_SECRET", "AGENTRL_METRICS_TOKEN"],
      "policy:current": ["AGENTRL_METRICS_TOKEN", "AGENTRL_POLICY_API_KEY"],
      rollout: ["AGENTRL_CONTROLLER_SECRET", "AGENTRL_METRICS_TOKEN", "AGENTRL_POLICY_API_KEY"],
      trainer: ["AGENTRL_METRICS_TOKEN"],
    };
    const roles = taskDefinitionsByRole(templates.compute);
    for (const [key, names] of Object.entries(expected)) {
      const container = roles.get(key)?.container as ContainerDefinition & {
        Secrets?: Array<{ Name: string; ValueFrom: unknown }>;
      };
      expect((container.Secrets ?? []).map((x) => x.Name).sort(), key).toEqual(names);
      for (const entry of container.Secrets ?? []) expect(JSON.stringify(entry.ValueFrom)).toMatch(/Ref/);
      expect(container.Environment?.map((e) => e.Name).filter((n) => /SECRET|API_KEY/.test(n))).toEqual([]);
    }
    for (const template of Object.values(templates))
      expect(JSON.stringify(template.toJSON())).not.toMatch(/"SecretString"|AGENTRL_ENV_SECRET=/);
  });

  it("serves every role's /metrics on a port of its own behind the scrape token, reachable only from inside the VPC", () => {
    const roles = taskDefinitionsByRole(templates.compute);
    expect(roles.size).toBeGreaterThan(8);
    for (const [key, { container, env }] of roles) {
      expect(env.AGENTRL_METRICS_PORT, key).toBe(String(METRICS_PORT));
      expect(env.AGENTRL_METRICS_HOST, key).toBe("0.0.0.0");
      const mapped = (container as { PortMappings?: Array<{ ContainerPort: number }> }).PortMappings ?? [];
      expect(
        mapped.map((p) => p.ContainerPort),
        key,
      ).toContain(METRICS_PORT);
      expect((container as { DockerLabels?: Record<string, string> }).DockerLabels, key).toMatchObject({
        ECS_PROMETHEUS_EXPORTER_PORT: String(METRICS_PORT),
        ECS_PROMETHEUS_METRICS_PATH: "/metrics",
      });
    }
    expect(templates.compute.toJSON().Outputs.MetricsTokenSecretArn.Value).toEqual({
      Ref: expect.stringMatching(/^MetricsToken/),
    });
    // the metrics port opens to the VPC's CIDR and nothing else; no API port opens to a CIDR
    const ingress = [
      ...resourcesOf(templates.compute, "AWS::EC2::SecurityGroupIngress").map(([, r]) => r.Properties),
      ...resourcesOf(templates.compute, "AWS::EC2::SecurityGroup").flatMap(
        ([, r]) => (r.Properties.SecurityGroupIngress as Array<Record<string, unknown>> | undefined) ?? [],
      ),
    ];
    const onMetrics = ingress.filter((rule) => rule.FromPort === METRICS_PORT);
    expect(onMetrics.length).toBe(roles.size);
    for (const rule of onMetrics) {
      expect(rule.ToPort).toBe(METRICS_PORT);
      expect(JSON.stringify(rule.CidrIp)).toMatch(/Vpc.*CidrBlock/);
    }
    const byCidr = ingress.filter((rule) => rule.CidrIp !== undefined && rule.FromPort !== METRICS_PORT);
    expect(byCidr).toEqual([]);
    expect(JSON.stringify(ingress)).not.toContain("0.0.0.0/0");
  });

  it("leaves env workers to their pools: no service runs them, each pool may only run, list, stop and pass its own", () => {
    const roles = taskDefinitionsByRole(templates.compute);
    const services = resourcesOf(templates.compute, "AWS::ECS::Service").map(([, s]) =>
      JSON.stringify(s.Properties.TaskDefinition),
    );
    const db = roles.get("env:db");
    const pool = roles.get("envpool:db");
    if (!db || !pool) throw new Error("env:db or envpool:db missing");
    expect(services).not.toContain(JSON.stringify({ Ref: db.id }));
    expect(services).toContain(JSON.stringify({ Ref: pool.id }));
    expect(pool.env.AGENTRL_ENV_CAPACITY_PROVIDER).toBe("FARGATE");
    const statements = taskRoleStatements(templates.compute, pool.id);
    const actions = statements.flatMap((s) => s.actions).sort();
    // ECS and PassRole for its workers; the depth of rollout-requests (its demand) from the role-access table.
    expect(actions).toEqual(
      [
        "ecs:DescribeTasks",
        "ecs:ListTasks",
        "ecs:RunTask",
        "ecs:StopTask",
        "ecs:TagResource",
        "iam:PassRole",
        "sqs:GetQueueAttributes",
        "sqs:GetQueueUrl",
      ].sort(),
    );
    const family = (templates.compute.toJSON().Resources[db.id] as Resource).Properties.Family as string;
    const run = statements.find((s) => s.actions.includes("ecs:RunTask"));
    expect(run?.resources.join()).toContain(`task-definition/${family}:*`);
    const pass = statements.find((s) => s.actions.includes("iam:PassRole"));
    expect(pass?.resources).toHaveLength(2);
    for (const statement of statements) expect(statement.resources).not.toContain("*");
  });

  it("puts the trainer and both policy servers on the GPU capacity provider with one GPU each", () => {
    const roles = taskDefinitionsByRole(templates.compute);
    const taskDefinitions = templates.compute.toJSON().Resources as Record<string, Resource>;
    for (const key of ["trainer", "policy:current", "policy:stale"]) {
      const { id, container } = roles.get(key) ?? { id: "", container: {} };
      expect(container.ResourceRequirements, key).toEqual([{ Type: "GPU", Value: "1" }]);
      expect(taskDefinitions[id]?.Properties.RequiresCompatibilities).toEqual(["EC2"]);
    }
    for (const key of ["controller", "feeder", "rollout", "env:db"]) {
      expect(roles.get(key)?.container.ResourceRequirements, key).toBeUndefined();
      expect(taskDefinitions[roles.get(key)?.id ?? ""]?.Properties.RequiresCompatibilities).toEqual(["FARGATE"]);
    }
    const gpuServices = resourcesOf(templates.compute, "AWS::ECS::Service").filter(
      ([, s]) => s.Properties.CapacityProviderStrategy !== undefined,
    );
    expect(gpuServices).toHaveLength(3);
    // Deployments stop the old GPU task first: there is no spare GPU for a replacement.
    for (const [, service] of gpuServices)
      expect(service.Properties.DeploymentConfiguration).toMatchObject({
        MinimumHealthyPercent: 0,
        MaximumPercent: 100,
      });
    const [[, launchTemplate]] = resourcesOf(templates.compute, "AWS::EC2::LaunchTemplate") as [[string, Resource]];
    const data = launchTemplate.Properties.LaunchTemplateData as Record<string, unknown>;
    expect(data.InstanceType).toEqual({ Ref: "GpuInstanceType" });
    expect(data.MetadataOptions).toMatchObject({ HttpTokens: "required" });
    expect(JSON.stringify(data.BlockDeviceMappings)).toContain('"Encrypted":true');
    const parameters = templates.compute.toJSON().Parameters as Record<string, { Default?: string }>;
    expect(parameters.GpuInstanceType?.Default).toBe("g5.xlarge");
    expect(Object.values(parameters).some((p) => p.Default?.includes("amazon-linux-2/gpu/recommended"))).toBe(true);
  });

  it("grants engines/ (synced engines' records) only to an experiment that syncs engines", () => {
    const enginesGrants = (template: Template) =>
      ["trainer", "rollout"].map((role) => {
        const id = taskDefinitionsByRole(template).get(role)?.id ?? "";
        return taskRoleStatements(template, id)
          .filter((statement) => statement.resources.some((resource) => resource.includes("/engines/")))
          .flatMap((statement) => statement.actions)
          .sort();
      });
    expect(enginesGrants(templates.compute)).toEqual([[], []]);
    const syncing = synthAgentRl({
      config: {
        policy: {
          exportHf: true,
          syncEngines: [{ id: "vllm-a", url: "http://vllm:8000", dialect: "vllm", modelDir: "/mnt/model" }],
        },
        rollout: { versionSource: "sync", syncEngine: "vllm-a" },
      },
    });
    expect(enginesGrants(syncing.templates.compute)).toEqual([["s3:GetObject", "s3:PutObject"], ["s3:GetObject"]]);
  }, 240_000);

  it("grants each role exactly its row of the role-access table, prefix-scoped, never on '*'", () => {
    // Symbolic names for what the compute stack imports: queue:<name>, dlq:<name>, bucket:<store>.
    const queueNames = new Map(
      resourcesOf(templates.messaging, "AWS::SQS::Queue").map(([id, queue]) => [
        id,
        String(queue.Properties.QueueName),
      ]),
    );
    const symbolOf = (logicalId: string): string => {
      const queueName = queueNames.get(logicalId);
      if (queueName !== undefined) {
        const logical = queueName.slice(`${config.transport.queuePrefix}-`.length);
        return logical.endsWith("-dlq") ? `dlq:${logical.slice(0, -4)}` : `queue:${logical}`;
      }
      if (logicalId.startsWith("StoresTrajectories")) return "bucket:trajectories";
      if (logicalId.startsWith("StoresCheckpoints")) return "bucket:checkpoints";
      throw new Error(`unexpected imported resource ${logicalId}`);
    };
    const exported = exportsOf(templates.stores.toJSON() as CfnTemplate, templates.messaging.toJSON() as CfnTemplate);
    const importValue = (name: string): string => {
      const value = exported.get(name) as { "Fn::GetAtt"?: [string, string] } | undefined;
      if (!value?.["Fn::GetAtt"]) throw new Error(`no export ${name}`);
      return symbolOf(value["Fn::GetAtt"][0]);
    };
    const definitions = taskRoleDefinitions(templates.compute.toJSON() as CfnTemplate);
    expect(definitions.map((d) => d.key)).toEqual(
      expect.arrayContaining([
        "controller",
        "feeder",
        "policy:current",
        "policy:stale",
        "rollout",
        "trainer",
        "env:db",
      ]),
    );
    // The env pool's ECS and PassRole statements are outside the table (their own test is above).
    const isPoolStatement = (raw: unknown) =>
      [(raw as PolicyStatement).Action].flat().every((action) => /^(ecs:|iam:PassRole$)/.test(action));
    for (const definition of definitions) {
      const granted = new Set<string>();
      if (definition.role !== "envpool")
        expect(definition.statements.filter(isPoolStatement), definition.key).toEqual([]);
      for (const raw of definition.statements.filter((statement) => !isPoolStatement(statement))) {
        const statement = resolveIntrinsics(raw, importValue) as PolicyStatement;
        expect(statement.Effect).toBe("Allow");
        for (const action of [statement.Action].flat())
          for (const resource of [statement.Resource].flat()) {
            expect(resource, definition.key).not.toBe("*");
            // object ARNs come out as "bucket:<store>/<prefix>*": name them as the table does
            const symbolic = resource.includes("/") ? resource.replace(/^bucket:/, "object:") : resource;
            granted.add(`${action} ${symbolic}`);
          }
      }
      const expected = permissionsOf(
        forFeatures(ROLE_ACCESS[definition.role as ContainerRole], accessFeaturesOf(config)),
      ).map((p) => `${p.action} ${p.resource}`);
      expect([...granted].sort(), definition.key).toEqual(expected.sort());
    }
    // Today's fixes, spelled out: the feeder keeps its cursor in the trajectory bucket; the rollout
    // worker reads trajectories and the checkpoint store; nobody sends to rollout-requests but the
    // feeder; policy servers touch no queue; policy-events has a reader.
    const permissions = (role: ContainerRole) =>
      permissionsOf(ROLE_ACCESS[role]).map((p) => `${p.action} ${p.resource}`);
    expect(permissions("feeder")).toEqual(
      expect.arrayContaining(["s3:PutObject object:trajectories/feeder/*", "sqs:ReceiveMessage queue:policy-events"]),
    );
    expect(permissions("rollout")).toEqual(
      expect.arrayContaining([
        "s3:GetObject object:trajectories/trajectories/*",
        "s3:GetObject object:checkpoints/policies/*",
      ]),
    );
    expect(permissions("rollout")).not.toContain("sqs:SendMessage queue:rollout-requests");
    expect(permissions("policy").filter((p) => p.startsWith("sqs:"))).toEqual([]);
  });

  it("scopes a sweep's results grant to its own prefix under the table's sweeps/", () => {
    const statements = resourcesOf(templates.sweeps, "AWS::IAM::Policy").flatMap(
      ([, policy]) => (policy.Properties.PolicyDocument as { Statement: unknown[] }).Statement,
    );
    const resolved = JSON.stringify(statements);
    expect(resolved).toContain('"s3:PutObject"');
    expect(resolved).toContain(`/${ROLE_ACCESS.sweep.stores[0]?.prefix}lr/*`);
    expect(resolved).not.toContain("s3:DeleteObject");
  });

  it("registers the controller and policy servers in Cloud Map and scales rollout workers on queue depth", () => {
    const names = resourcesOf(templates.compute, "AWS::ServiceDiscovery::Service").map(([, s]) => s.Properties.Name);
    expect(names.sort()).toEqual(["controller", "policy-current", "policy-stale"]);
    const roles = taskDefinitionsByRole(templates.compute);
    expect(roles.get("rollout")?.env.AGENTRL_CONTROLLER_URL).toBe(
      `http://controller.agentrl.local:${config.tasks.controllerPort}`,
    );
    const [[, target]] = resourcesOf(templates.compute, "AWS::ApplicationAutoScaling::ScalableTarget") as [
      [string, Resource],
    ];
    expect(target.Properties).toMatchObject({
      MinCapacity: config.rollout.workers,
      MaxCapacity: 4 * config.rollout.workers,
    });
    const alarms = resourcesOf(templates.compute, "AWS::CloudWatch::Alarm").map(([, a]) => a.Properties);
    expect(alarms.length).toBeGreaterThanOrEqual(2);
    for (const alarm of alarms) {
      expect(alarm).toMatchObject({ MetricName: "ApproximateNumberOfMessagesVisible", Namespace: "AWS/SQS" });
      expect(JSON.stringify(alarm.Dimensions)).toContain("RolloutRequests");
    }
  });
});

describe("sweep stack", () => {
  it("schedules an ECS RunTask of the sweep runner carrying the spec", () => {
    const [[, schedule]] = resourcesOf(templates.sweeps, "AWS::Scheduler::Schedule") as [[string, Resource]];
    expect(schedule.Properties.ScheduleExpression).toBe("rate(7 days)");
    const target = schedule.Properties.Target as { EcsParameters: { LaunchType: string; TaskCount: number } };
    expect(target.EcsParameters).toMatchObject({ LaunchType: "FARGATE", TaskCount: 1 });
    const roles = taskDefinitionsByRole(templates.sweeps);
    const runner = roles.get("sweep");
    expect(ContainerEnv.safeParse(runner?.env).success).toBe(true);
    expect(SweepSpec.parse(JSON.parse(runner?.env.AGENTRL_SWEEP_JSON ?? "{}"))).toEqual(sweep);
    const statements = taskRoleStatements(templates.sweeps, runner?.id ?? "");
    expect(statements.flatMap((s) => s.actions).every((a) => a.startsWith("s3:Put") || a.startsWith("s3:Abort"))).toBe(
      true,
    );
    expect(statements.flatMap((s) => s.resources).every((r) => r.includes("/sweeps/lr/*"))).toBe(true);
  });

  it("runs the sweep on an image of its own: the trainer's CPU variant, neither the functions nor the GPU image", () => {
    const imageOf = (template: Template, role: string) => {
      const image = taskDefinitionsByRole(template).get(role)?.container.Image;
      if (image === undefined) throw new Error(`no image for ${role}`);
      return JSON.stringify(image);
    };
    const sweepImage = imageOf(templates.sweeps, "sweep");
    expect(sweepImage).not.toBe(imageOf(templates.compute, "controller"));
    expect(sweepImage).not.toBe(imageOf(templates.compute, "trainer"));
    expect(imageOf(templates.compute, "policy:current")).toBe(imageOf(templates.compute, "trainer"));
  });
});
