/**
 * Reading a synthesized CloudFormation template the way a deployment would: each ECS task
 * definition's container environment and its task role's policy documents, with the
 * intrinsics CDK emits (Fn::ImportValue, Fn::Join, Ref of pseudo parameters) resolved.
 * The deploy rehearsal and the role-access test both read policies through this.
 */

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
  /** The role's AGENTRL_ROLE. */
  readonly role: string;
  /** Unique per service: `rollout`, `policy:current`, `env:db`. */
  readonly key: string;
  /** The container environment as written in the template (values may be intrinsics). */
  readonly environment: Readonly<Record<string, unknown>>;
  /** Statements of every policy attached to the task role (values may be intrinsics). */
  readonly statements: readonly unknown[];
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

/** Every task definition of the compute template with its role, environment and task-role statements. */
export function taskRoleDefinitions(compute: CfnTemplate): TaskRoleDefinition[] {
  const out: TaskRoleDefinition[] = [];
  for (const resource of Object.values(compute.Resources)) {
    if (resource.Type !== "AWS::ECS::TaskDefinition") continue;
    const properties = resource.Properties ?? {};
    const container = (
      properties.ContainerDefinitions as Array<{ Environment?: Array<{ Name: string; Value: unknown }> }>
    )[0];
    const environment = Object.fromEntries((container?.Environment ?? []).map((e) => [e.Name, e.Value]));
    const role = String(environment.AGENTRL_ROLE ?? "");
    if (role === "" || role === "sweep") continue;
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
    out.push({ role, key: detail ? `${role}:${String(detail)}` : role, environment, statements });
  }
  return out.sort((a, b) => a.key.localeCompare(b.key));
}

/** Export name -> the Output's value, of one or more templates (values may be intrinsics). */
export function exportsOf(...templates: readonly CfnTemplate[]): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const template of templates)
    for (const output of Object.values(template.Outputs ?? {}))
      if (output.Export && typeof output.Export.Name === "string") out.set(output.Export.Name, output.Value);
  return out;
}
