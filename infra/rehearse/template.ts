/**
 * Reading a synthesized CloudFormation template the way a deployment would: each ECS task
 * definition's container environment, stop timeout and task role's policy documents, with the
 * intrinsics CDK emits (Fn::ImportValue, Fn::Join, Ref of pseudo parameters) resolved. The one
 * reader of templates for the deploy rehearsal (process and container runs), the role-access
 * test and the containers test.
 */
import { type ContainerRole, ContainerRole as ContainerRoleSchema } from "../../shared/config/containerEnv.ts";

/** A template as `cdk synth` writes it (only what is read here). */
export interface CfnTemplate {
  readonly Resources: Readonly<
    Record<string, { readonly Type: string; readonly Properties?: Record<string, unknown> }>
  >;
  readonly Outputs?: Readonly<
    Record<string, { readonly Value: unknown; readonly Export?: { readonly Name: unknown } }>
  >;
}

/** An IAM policy statement after resolution. */
export interface PolicyStatement {
  readonly Effect: "Allow" | "Deny";
  readonly Action: string | string[];
  readonly Resource: string | string[];
}

/** One ECS task definition of the compute template. */
export interface TaskRoleDefinition {
  /** Logical id of the AWS::ECS::TaskDefinition. */
  readonly logicalId: string;
  /** The role's AGENTRL_ROLE. */
  readonly role: ContainerRole;
  /** Unique per service: `rollout`, `policy:current`, `env:db`. */
  readonly key: string;
  /** The service's name, also its Cloud Map name: `controller`, `policy-current`, `env-db`. */
  readonly name: string;
  /** The container environment as written in the template (values may be intrinsics). */
  readonly environment: Readonly<Record<string, unknown>>;
  /** Statements of every policy attached to the task role (values may be intrinsics). */
  readonly statements: readonly unknown[];
  /** Seconds ECS waits after SIGTERM before SIGKILL (the container's StopTimeout; ECS's default is 30). */
  readonly stopTimeoutSeconds: number;
  /** The task's other containers (a dbbench worker's MySQL): name, image and port mappings. */
  readonly sidecars: ReadonlyArray<{ name: string; image: unknown; portMappings: readonly unknown[] }>;
}

/** Resolves the intrinsics of `value`; `importValue` maps an export name to its value. */
export function resolveIntrinsics(
  value: unknown,
  importValue: (exportName: string) => string,
  pseudo: Readonly<Record<string, string>> = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::URLSuffix": "amazonaws.com",
  },
): unknown {
  if (Array.isArray(value)) return value.map((item) => resolveIntrinsics(item, importValue, pseudo));
  if (typeof value !== "object" || value === null) return value;
  const entries = Object.entries(value);
  if (entries.length === 1) {
    const [name, argument] = entries[0]!;
    if (name === "Fn::ImportValue") return importValue(String(resolveIntrinsics(argument, importValue, pseudo)));
    if (name === "Fn::Join") {
      const [separator, parts] = argument as [string, unknown[]];
      return parts.map((part) => String(resolveIntrinsics(part, importValue, pseudo))).join(separator);
    }
    if (name === "Ref" && typeof argument === "string" && argument in pseudo) return pseudo[argument];
    if (name === "Ref" || name.startsWith("Fn::"))
      throw new Error(`cannot resolve ${JSON.stringify(value)} outside CloudFormation`);
  }
  return Object.fromEntries(entries.map(([key, item]) => [key, resolveIntrinsics(item, importValue, pseudo)]));
}

/**
 * Every task definition of the compute template with its role, environment, stop timeout and
 * task-role statements (the sweep's, in the sweep stack, is not a pipeline service).
 */
export function taskRoleDefinitions(compute: CfnTemplate): TaskRoleDefinition[] {
  const out: TaskRoleDefinition[] = [];
  for (const [logicalId, resource] of Object.entries(compute.Resources)) {
    if (resource.Type !== "AWS::ECS::TaskDefinition") continue;
    const properties = resource.Properties ?? {};
    const containers = (properties.ContainerDefinitions ?? []) as Array<{
      Name?: string;
      Image?: unknown;
      Environment?: Array<{ Name: string; Value: unknown }>;
      StopTimeout?: number;
      PortMappings?: unknown[];
    }>;
    // One role container (it carries AGENTRL_ROLE); any others are its sidecars (dbbench's MySQL).
    const roleContainers = containers.filter((c) => (c.Environment ?? []).some((e) => e.Name === "AGENTRL_ROLE"));
    if (roleContainers.length !== 1)
      throw new Error(`${logicalId}: expected one role container, got ${roleContainers.length}`);
    const container = roleContainers[0];
    const sidecars = containers
      .filter((c) => c !== container)
      .map((c) => ({ name: String(c.Name), image: c.Image, portMappings: c.PortMappings ?? [] }));
    const environment = Object.fromEntries((container?.Environment ?? []).map((e) => [e.Name, e.Value]));
    const declared = ContainerRoleSchema.safeParse(environment.AGENTRL_ROLE);
    if (!declared.success)
      throw new Error(`${logicalId}: AGENTRL_ROLE ${JSON.stringify(environment.AGENTRL_ROLE)} is not a container role`);
    const role = declared.data;
    if (role === "sweep") continue;
    const roleId = (properties.TaskRoleArn as { "Fn::GetAtt": [string, string] })["Fn::GetAtt"][0];
    const statements = Object.values(compute.Resources)
      .filter(
        (policy) =>
          policy.Type === "AWS::IAM::Policy" &&
          JSON.stringify(policy.Properties?.Roles) === JSON.stringify([{ Ref: roleId }]),
      )
      .flatMap(
        (policy) => (policy.Properties?.PolicyDocument as { Statement?: unknown[] } | undefined)?.Statement ?? [],
      );
    const detail = environment.AGENTRL_TASK ?? environment.AGENTRL_POLICY_POOL;
    out.push({
      logicalId,
      role,
      key: detail ? `${role}:${String(detail)}` : role,
      name: detail ? `${role}-${String(detail)}` : role,
      environment,
      statements,
      stopTimeoutSeconds: container?.StopTimeout ?? 30,
      sidecars,
    });
  }
  return out.sort((a, b) => a.key.localeCompare(b.key));
}

/**
 * A task definition's container environment as the task would see it: every value resolved
 * against the deployed stacks' exports (`importValue`) and the pseudo parameters; a value that
 * cannot be known before deploy is an error, never a guess.
 */
export function resolveEnvironment(
  definition: TaskRoleDefinition,
  importValue: (exportName: string) => string,
): Record<string, string> {
  return Object.fromEntries(
    Object.entries(definition.environment).map(([name, value]) => {
      const resolved = resolveIntrinsics(value, importValue);
      if (typeof resolved !== "string" && typeof resolved !== "number")
        throw new Error(`${definition.logicalId}.${name}: resolves to ${JSON.stringify(resolved)}, not a value`);
      return [name, String(resolved)];
    }),
  );
}

/** A template moto's CloudFormation can create: without CDK's bootstrap-version rule (moto has no bootstrap). */
export function withoutBootstrapCheck(template: CfnTemplate): Record<string, unknown> {
  const {
    Rules: rules,
    Parameters: parameters,
    ...rest
  } = template as CfnTemplate & {
    Rules?: Record<string, unknown>;
    Parameters?: Record<string, unknown>;
  };
  const { CheckBootstrapVersion: _rule, ...keptRules } = rules ?? {};
  const { BootstrapVersion: _version, ...keptParameters } = parameters ?? {};
  return {
    ...rest,
    ...(Object.keys(keptRules).length > 0 ? { Rules: keptRules } : {}),
    ...(Object.keys(keptParameters).length > 0 ? { Parameters: keptParameters } : {}),
  };
}

/** Export name -> the Output's value, of one or more templates (values may be intrinsics). */
export function exportsOf(...templates: readonly CfnTemplate[]): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const template of templates)
    for (const output of Object.values(template.Outputs ?? {}))
      if (output.Export && typeof output.Export.Name === "string") out.set(output.Export.Name, output.Value);
  return out;
}
