import { ENGINE_RECORD_PREFIX } from "../policy/engine-sync.ts";
import { CHECKPOINT_PREFIX } from "../protocol/checkpoints.ts";
import { STEP_RECORD_PREFIX } from "../protocol/stepRecord.ts";
import type { QueueName, StoreName } from "../transport/types.ts";
import type { ContainerRole } from "./containerEnv.ts";

/**
 * What each role touches, declared once: the queues it consumes, produces to or only measures,
 * and the stores and key prefixes it reads and writes. Code hands every role a Transport view
 * restricted to its row (shared/transport/restricted.ts: anything else throws, naming role and
 * resource), and infra grants exactly this table (infra/constructs/roleGrants.ts), so a deployed
 * role can do what its code does and nothing more. test/infra/roleAccess.test.ts checks that the
 * synthesized policies say the same, role by role.
 */

/**
 * consume: receive, delete, extend visibility, and dead-letter with a reason (`fail` sends to the
 * queue's DLQ); produce: send; depth: read the approximate depth (backpressure).
 */
export type QueueUse = "consume" | "produce" | "depth";
/** read: get, head and list; write: put and put-if-absent. No role deletes objects. */
export type StoreUse = "read" | "write";

/**
 * A part of the table only some experiments use. Code may touch it whenever its experiment enables
 * it; infra grants it only then ({@link accessFeaturesOf}), so a deployment that does not use it
 * holds no grant for it.
 */
export type AccessFeature = "engineSync";

/** One store prefix a role may touch. */
export interface StoreAccess {
  readonly store: StoreName;
  /** Key prefix, ending in '/'. */
  readonly prefix: string;
  readonly use: readonly StoreUse[];
  /** Only for experiments that use this feature. */
  readonly feature?: AccessFeature;
}

/** One row of the table. */
export interface RoleAccess {
  readonly queues: Readonly<Partial<Record<QueueName, readonly QueueUse[]>>>;
  readonly stores: readonly StoreAccess[];
}

/** Key prefixes of the stores (the code building keys starts them with these). */
export const KEY_PREFIXES = {
  /** trajectories/<experimentId>/<groupId>/<trajectoryId>.json (rollout workers write, the trainer reads). */
  trajectories: "trajectories/",
  /** feeder/<experimentId>/cursor.json: the feeder's position (it alone reads and writes it). */
  feederCursor: "feeder/",
  /** policies/vN/: published versions (the trainer and `agentrl policy publish` write them). */
  policies: CHECKPOINT_PREFIX,
  /** sweeps/<name>/<point>/: a deployed sweep's run folders (infra narrows it to the sweep's name). */
  sweeps: "sweeps/",
  /** steps/<experimentId>/step-N.json: the trainer's per-step record that `agentrl view` shows. */
  stepRecords: STEP_RECORD_PREFIX,
  /** engines/<id>.json: what each synced engine serves (the trainer's syncer writes, rollout workers read). */
  engines: ENGINE_RECORD_PREFIX,
  /** tensorboard/<experimentId>/: TensorBoard event files on the AWS transport (the trainer writes them). */
  tensorboard: "tensorboard/",
} as const;

/**
 * The table. `policy-events` has one reader, the feeder: it learns of new versions from the
 * PolicyPublished events (sync mode feeds a batch per version) instead of listing the checkpoint
 * store, and drains them in async mode so the queue never fills. Policy servers follow the
 * checkpoint store by polling, since every server must see every version and a queue message
 * reaches one consumer.
 */
export const ROLE_ACCESS: Readonly<Record<ContainerRole, RoleAccess>> = {
  controller: { queues: {}, stores: [] },
  env: { queues: {}, stores: [] },
  // The env pool counts queued rollout requests as demand; its ECS rights (RunTask, StopTask)
  // are granted apart, in infra's compute stack.
  envpool: { queues: { "rollout-requests": ["depth"] }, stores: [] },
  policy: {
    queues: {},
    stores: [{ store: "checkpoints", prefix: KEY_PREFIXES.policies, use: ["read"] }],
  },
  trainer: {
    queues: { trajectories: ["consume"], "policy-events": ["produce"] },
    stores: [
      { store: "trajectories", prefix: KEY_PREFIXES.trajectories, use: ["read"] },
      { store: "trajectories", prefix: KEY_PREFIXES.stepRecords, use: ["write"] },
      { store: "trajectories", prefix: KEY_PREFIXES.tensorboard, use: ["write"] },
      { store: "checkpoints", prefix: KEY_PREFIXES.policies, use: ["read", "write"] },
      // read: a restarted syncer continues the record's seq, never reusing one
      { store: "checkpoints", prefix: KEY_PREFIXES.engines, use: ["read", "write"], feature: "engineSync" },
    ],
  },
  feeder: {
    // depth of both queues: async mode keeps queued requests + unconsumed trajectories bounded
    queues: { "rollout-requests": ["produce", "depth"], trajectories: ["depth"], "policy-events": ["consume"] },
    stores: [{ store: "trajectories", prefix: KEY_PREFIXES.feederCursor, use: ["read", "write"] }],
  },
  rollout: {
    queues: { "rollout-requests": ["consume"], trajectories: ["produce"] },
    stores: [
      // read: a redelivered request whose trajectory is stored already is announced again, not rerun
      { store: "trajectories", prefix: KEY_PREFIXES.trajectories, use: ["read", "write"] },
      // the chat codec comes from the newest version's tokenizer.json
      { store: "checkpoints", prefix: KEY_PREFIXES.policies, use: ["read"] },
      // rollout.versionSource sync: a synced engine's record labels its answers
      { store: "checkpoints", prefix: KEY_PREFIXES.engines, use: ["read"], feature: "engineSync" },
    ],
  },
  gateway: {
    // depth of both queues: a new session is refused (429) when it would break the feeder's staleness bound
    queues: { trajectories: ["produce", "depth"], "rollout-requests": ["depth"] },
    stores: [
      // write-only: a released group's trajectories are stored, then announced (never read back)
      { store: "trajectories", prefix: KEY_PREFIXES.trajectories, use: ["write"] },
      // the chat codec comes from the newest version's tokenizer.json
      { store: "checkpoints", prefix: KEY_PREFIXES.policies, use: ["read"] },
    ],
  },
  sweep: {
    queues: {},
    stores: [{ store: "checkpoints", prefix: KEY_PREFIXES.sweeps, use: ["write"] }],
  },
};

/**
 * The features an experiment uses: `engineSync` when the trainer syncs external engines
 * (policy.syncEngines) or a rollout pool is labelled by their records (rollout.versionSource sync).
 */
export function accessFeaturesOf(config: {
  readonly policy: { readonly syncEngines: readonly unknown[] };
  readonly rollout: { readonly versionSource: string };
}): ReadonlySet<AccessFeature> {
  const features = new Set<AccessFeature>();
  if (config.policy.syncEngines.length > 0 || config.rollout.versionSource === "sync") features.add("engineSync");
  return features;
}

/** `access` without the rows of features the experiment does not use: what infra grants. */
export function forFeatures(access: RoleAccess, features: ReadonlySet<AccessFeature>): RoleAccess {
  return {
    queues: access.queues,
    stores: access.stores.filter((grant) => grant.feature === undefined || features.has(grant.feature)),
  };
}

/** IAM actions on the main queue, per use. */
export const QUEUE_ACTIONS: Readonly<Record<QueueUse, readonly string[]>> = {
  // GetQueueAttributes is only for reading the depth: the deploy rehearsal found that no consumer or
  // producer calls it (infra/rehearse/grantUse.ts).
  consume: ["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"],
  produce: ["sqs:SendMessage", "sqs:GetQueueUrl"],
  depth: ["sqs:GetQueueAttributes", "sqs:GetQueueUrl"],
};
/** IAM actions on the dead-letter queue of a consumed queue: `fail` moves a message there with its reason. */
export const DEAD_LETTER_ACTIONS: readonly string[] = ["sqs:SendMessage", "sqs:GetQueueUrl"];
/**
 * IAM actions on a store prefix's objects, per use (HeadObject is authorized as GetObject).
 * Reading also needs s3:ListBucket on the bucket: listing versions, and S3 answers a GET of a
 * missing key with 404 (not 403) only to a caller that may list.
 */
export const STORE_OBJECT_ACTIONS: Readonly<Record<StoreUse, readonly string[]>> = {
  read: ["s3:GetObject"],
  write: ["s3:PutObject"],
};
export const STORE_BUCKET_READ_ACTIONS: readonly string[] = ["s3:ListBucket"];

/** One permission a role needs: an IAM action on a logical resource. */
export interface Permission {
  readonly action: string;
  /** `queue:<name>`, `dlq:<name>`, `bucket:<store>` or `object:<store>/<prefix>*`. */
  readonly resource: string;
}

/** The permissions a role's row implies, de-duplicated and sorted (what infra grants). */
export function permissionsOf(access: RoleAccess): Permission[] {
  const out = new Map<string, Permission>();
  const add = (action: string, resource: string) => out.set(`${action} ${resource}`, { action, resource });
  for (const [queue, uses] of Object.entries(access.queues) as Array<[QueueName, readonly QueueUse[]]>)
    for (const use of uses) {
      for (const action of QUEUE_ACTIONS[use]) add(action, `queue:${queue}`);
      if (use === "consume") for (const action of DEAD_LETTER_ACTIONS) add(action, `dlq:${queue}`);
    }
  for (const grant of access.stores)
    for (const use of grant.use) {
      for (const action of STORE_OBJECT_ACTIONS[use]) add(action, `object:${grant.store}/${grant.prefix}*`);
      if (use === "read") for (const action of STORE_BUCKET_READ_ACTIONS) add(action, `bucket:${grant.store}`);
    }
  return [...out.values()].sort((a, b) => `${a.resource} ${a.action}`.localeCompare(`${b.resource} ${b.action}`));
}

/** True when `access` lets its role use `key` of `store` for `use`. */
export function allowsKey(access: RoleAccess, store: StoreName, key: string, use: StoreUse): boolean {
  return access.stores.some(
    (grant) => grant.store === store && key.startsWith(grant.prefix) && grant.use.includes(use),
  );
}

/** True when `access` lets its role list keys under `prefix` (a prefix inside one it may read). */
export function allowsList(access: RoleAccess, store: StoreName, prefix: string): boolean {
  return access.stores.some(
    (grant) => grant.store === store && grant.use.includes("read") && prefix.startsWith(grant.prefix),
  );
}
