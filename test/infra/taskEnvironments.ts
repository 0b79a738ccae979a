import type { ContainerRole } from "../../shared/config/containerEnv.ts";

/** A CloudFormation template as JSON (only the parts read here are typed). */
export interface TemplateJson {
  Resources?: Record<string, { Type: string; Properties?: Record<string, unknown> }>;
  Parameters?: Record<string, unknown>;
  Rules?: Record<string, unknown>;
  [key: string]: unknown;
}

/** One ECS task definition's container environment, as synthesized. */
export interface TaskEnvironment {
  /** Logical id of the AWS::ECS::TaskDefinition. */
  readonly logicalId: string;
  readonly role: ContainerRole;
  /** `controller`, `env-db`, `policy-current`, `trainer`, ... */
  readonly name: string;
  readonly environment: Record<string, string>;
  /** Seconds ECS waits after SIGTERM before SIGKILL (the container's StopTimeout; ECS's default is 30). */
  readonly stopTimeoutSeconds: number;
}

/** What CloudFormation knows at deploy: the other stacks' exports and the pseudo parameters (`AWS::Region`). */
export interface DeployedValues {
  readonly exports: ReadonlyMap<string, string>;
  readonly pseudoParameters: Readonly<Record<string, string>>;
}

/**
 * Resolves a template value that must be known at deploy: a literal, a pseudo parameter
 * (`Ref: AWS::Region`), or a cross-stack reference (`Fn::ImportValue`) looked up in what the
 * deployed stacks exported. Anything else is an error: this test must not guess what
 * CloudFormation would produce.
 */
export function resolveValue(value: unknown, deployed: DeployedValues, where: string): string {
  if (typeof value === "string") return value;
  if (typeof value === "object" && value !== null && "Ref" in value) {
    const name = (value as Record<string, unknown>).Ref;
    const resolved = typeof name === "string" ? deployed.pseudoParameters[name] : undefined;
    if (resolved === undefined) throw new Error(`${where}: cannot resolve Ref ${JSON.stringify(name)}`);
    return resolved;
  }
  if (typeof value === "object" && value !== null && "Fn::ImportValue" in value) {
    const name = (value as Record<string, unknown>)["Fn::ImportValue"];
    const resolved = typeof name === "string" ? deployed.exports.get(name) : undefined;
    if (resolved === undefined)
      throw new Error(`${where}: no export ${JSON.stringify(name)} among the deployed stacks`);
    return resolved;
  }
  throw new Error(`${where}: cannot resolve ${JSON.stringify(value)} before deploy`);
}

/**
 * Every task definition's container environment in a synthesized compute template, resolved;
 * task definitions of `skipRoles` are left out before their environment is resolved.
 */
export function taskEnvironments(
  template: TemplateJson,
  deployed: DeployedValues,
  skipRoles: readonly ContainerRole[] = [],
): TaskEnvironment[] {
  const out: TaskEnvironment[] = [];
  for (const [logicalId, resource] of Object.entries(template.Resources ?? {})) {
    if (resource.Type !== "AWS::ECS::TaskDefinition") continue;
    const containers = resource.Properties?.ContainerDefinitions as
      | Array<{ Environment?: Array<{ Name: string; Value: unknown }>; StopTimeout?: number }>
      | undefined;
    if (containers?.length !== 1) throw new Error(`${logicalId}: expected one container, got ${containers?.length}`);
    const declaredRole = containers[0]?.Environment?.find((e) => e.Name === "AGENTRL_ROLE")?.Value;
    if (skipRoles.some((role) => role === declaredRole)) continue;
    const environment = Object.fromEntries(
      (containers[0]?.Environment ?? []).map(({ Name, Value }) => [
        Name,
        resolveValue(Value, deployed, `${logicalId}.${Name}`),
      ]),
    );
    const role = environment.AGENTRL_ROLE as ContainerRole | undefined;
    if (!role) throw new Error(`${logicalId}: no AGENTRL_ROLE in its environment`);
    const name =
      role === "env"
        ? `env-${environment.AGENTRL_TASK}`
        : role === "policy"
          ? `policy-${environment.AGENTRL_POLICY_POOL}`
          : role;
    out.push({ logicalId, role, name, environment, stopTimeoutSeconds: containers[0]?.StopTimeout ?? 30 });
  }
  return out;
}

/** A template moto's CloudFormation can create: without CDK's bootstrap-version rule (moto has no bootstrap). */
export function withoutBootstrapRule(template: TemplateJson): TemplateJson {
  const { Rules, Parameters, ...rest } = template;
  const rules = Object.fromEntries(Object.entries(Rules ?? {}).filter(([id]) => id !== "CheckBootstrapVersion"));
  const parameters = Object.fromEntries(Object.entries(Parameters ?? {}).filter(([id]) => id !== "BootstrapVersion"));
  return {
    ...rest,
    ...(Object.keys(rules).length > 0 ? { Rules: rules } : {}),
    ...(Object.keys(parameters).length > 0 ? { Parameters: parameters } : {}),
  };
}
