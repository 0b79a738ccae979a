import * as iam from "aws-cdk-lib/aws-iam";
import type * as s3 from "aws-cdk-lib/aws-s3";
import {
  DEAD_LETTER_ACTIONS,
  QUEUE_ACTIONS,
  type QueueUse,
  type RoleAccess,
  STORE_BUCKET_READ_ACTIONS,
  STORE_OBJECT_ACTIONS,
} from "../../shared/config/roleAccess.ts";
import type { QueueName, StoreName } from "../../shared/transport/types.ts";
import type { QueueWithDlq } from "./messaging.ts";

/** The deployed resources the role-access table names (a stack may hold only some of them). */
export interface GrantTargets {
  readonly queues?: Readonly<Partial<Record<QueueName, QueueWithDlq>>>;
  readonly buckets: Readonly<Partial<Record<StoreName, s3.IBucket>>>;
}

function target<T>(found: T | undefined, what: string): T {
  if (found === undefined)
    throw new Error(`grantRoleAccess: the role-access table names ${what}, which this stack was not given`);
  return found;
}

/**
 * Grants `role` exactly its row of the role-access table (shared/config/roleAccess.ts): one
 * statement per queue or bucket resource, object actions scoped to the row's key prefixes. No
 * CDK grantXxx() here: their action sets are wider than what the code does (e.g. delete and
 * abort on whole buckets), and the table is the one source of what a role may touch.
 * @param narrowPrefix optional narrowing of every store prefix (the sweep's `sweeps/<name>/`).
 */
export function grantRoleAccess(
  role: iam.IRole,
  access: RoleAccess,
  targets: GrantTargets,
  narrowPrefix: (prefix: string) => string = (prefix) => prefix,
): void {
  for (const [name, uses] of Object.entries(access.queues) as Array<[QueueName, readonly QueueUse[]]>) {
    const { queue, deadLetterQueue } = target(targets.queues?.[name], `queue ${name}`);
    const actions = new Set(uses.flatMap((use) => QUEUE_ACTIONS[use]));
    role.addToPrincipalPolicy(new iam.PolicyStatement({ actions: [...actions].sort(), resources: [queue.queueArn] }));
    if (uses.includes("consume"))
      role.addToPrincipalPolicy(
        new iam.PolicyStatement({ actions: [...DEAD_LETTER_ACTIONS].sort(), resources: [deadLetterQueue.queueArn] }),
      );
  }
  for (const grant of access.stores) {
    const bucket = target(targets.buckets[grant.store], `store ${grant.store}`);
    const actions = grant.use.flatMap((use) => STORE_OBJECT_ACTIONS[use]);
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: [...new Set(actions)].sort(),
        resources: [bucket.arnForObjects(`${narrowPrefix(grant.prefix)}*`)],
      }),
    );
  }
  const readBuckets = new Set(access.stores.filter((grant) => grant.use.includes("read")).map((grant) => grant.store));
  for (const store of [...readBuckets].sort())
    role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: [...STORE_BUCKET_READ_ACTIONS],
        resources: [target(targets.buckets[store], `store ${store}`).bucketArn],
      }),
    );
}
