import { allowsKey, allowsList, type QueueUse, ROLE_ACCESS, type RoleAccess } from "../config/roleAccess.ts";
import { TransportError } from "./errors.ts";
import type {
  DeadLetter,
  ObjectInfo,
  ObjectStore,
  Queue,
  ReceivedMessage,
  ReceiveOptions,
  StoreName,
  Transport,
} from "./types.ts";

/**
 * A role touched a queue, store or key prefix outside its row of the role-access table
 * (shared/config/roleAccess.ts). Deployed, IAM would deny the same call; locally this error
 * makes the tests see it first.
 */
export class RoleAccessError extends TransportError {
  override readonly name = "RoleAccessError";
  constructor(
    readonly role: string,
    readonly operation: string,
    readonly resource: string,
  ) {
    super(
      `role ${role} may not ${operation} ${resource}: not in its row of the role-access table (shared/config/roleAccess.ts)`,
    );
  }
}

/** Called with every refused access before it throws (callers may swallow the error; the report must not be lost). */
export type AccessViolationSink = (error: RoleAccessError) => void;

const reportToStderr: AccessViolationSink = (error) =>
  process.stderr.write(
    `${JSON.stringify({ event: "access-violation", role: error.role, operation: error.operation, resource: error.resource })}\n`,
  );

/**
 * `inner` seen through one role's row: every queue and store call outside it throws
 * RoleAccessError naming role, operation and resource (and is reported to `onViolation`, by
 * default one JSON line on stderr, since some callers swallow errors of best-effort calls).
 * @example const transport = restrictTransport(await createTransport(config.transport), "feeder");
 */
export function restrictTransport(
  inner: Transport,
  role: keyof typeof ROLE_ACCESS,
  options: { access?: RoleAccess; onViolation?: AccessViolationSink } = {},
): Transport {
  const access = options.access ?? ROLE_ACCESS[role];
  const refuse = (operation: string, resource: string): never => {
    const error = new RoleAccessError(role, operation, resource);
    (options.onViolation ?? reportToStderr)(error);
    throw error;
  };
  return {
    queue: (name) => new RestrictedQueue(inner.queue(name), access.queues[name] ?? [], refuse),
    store: (name) => new RestrictedStore(inner.store(name), name, access, refuse),
    // Only the run's owner tidies, after every role has stopped; no role does.
    tidy: async () => refuse("tidy", "stores"),
    close: () => inner.close(),
  };
}

type Refuse = (operation: string, resource: string) => never;

class RestrictedQueue implements Queue {
  readonly name: string;
  constructor(
    private readonly inner: Queue,
    private readonly uses: readonly QueueUse[],
    private readonly refuse: Refuse,
  ) {
    this.name = inner.name;
  }

  // Methods are async so a refusal is a rejected promise, as a denied SDK call would be.
  private check(use: QueueUse, operation: string): void {
    if (!this.uses.includes(use)) this.refuse(`${operation} (${use})`, `queue ${this.name}`);
  }

  async send(body: string): Promise<string> {
    this.check("produce", "send to");
    return this.inner.send(body);
  }
  async sendBatch(bodies: readonly string[]): Promise<string[]> {
    this.check("produce", "send to");
    return this.inner.sendBatch(bodies);
  }
  async receive(options?: ReceiveOptions): Promise<ReceivedMessage[]> {
    this.check("consume", "receive from");
    return this.inner.receive(options);
  }
  async delete(receiptHandle: string): Promise<void> {
    this.check("consume", "delete from");
    return this.inner.delete(receiptHandle);
  }
  async changeVisibility(receiptHandle: string, visibilityTimeoutSeconds: number): Promise<void> {
    this.check("consume", "change visibility in");
    return this.inner.changeVisibility(receiptHandle, visibilityTimeoutSeconds);
  }
  async fail(receiptHandle: string, reason: string): Promise<void> {
    this.check("consume", "fail a message of");
    return this.inner.fail(receiptHandle, reason);
  }
  async approximateDepth(): Promise<{ visible: number; inFlight: number }> {
    if (!this.uses.includes("depth")) this.refuse("read the depth (depth)", `queue ${this.name}`);
    return this.inner.approximateDepth();
  }
  async deadLetters(max?: number): Promise<DeadLetter[]> {
    this.check("consume", "read the dead letters of");
    return this.inner.deadLetters(max);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

class RestrictedStore implements ObjectStore {
  constructor(
    private readonly inner: ObjectStore,
    private readonly name: StoreName,
    private readonly access: RoleAccess,
    private readonly refuse: Refuse,
  ) {}

  private check(key: string, use: "read" | "write", operation: string): void {
    if (!allowsKey(this.access, this.name, key, use))
      this.refuse(`${operation} (${use})`, `${this.name} store key ${key}`);
  }

  async put(key: string, body: Uint8Array | string): Promise<void> {
    this.check(key, "write", "put");
    return this.inner.put(key, body);
  }
  async putIfAbsent(key: string, body: Uint8Array | string): Promise<boolean> {
    this.check(key, "write", "put");
    return this.inner.putIfAbsent(key, body);
  }
  async get(key: string): Promise<Uint8Array | undefined> {
    this.check(key, "read", "get");
    return this.inner.get(key);
  }
  async getText(key: string): Promise<string | undefined> {
    this.check(key, "read", "get");
    return this.inner.getText(key);
  }
  async head(key: string): Promise<ObjectInfo | undefined> {
    this.check(key, "read", "head");
    return this.inner.head(key);
  }
  async list(prefix: string): Promise<ObjectInfo[]> {
    if (!allowsList(this.access, this.name, prefix)) this.refuse("list (read)", `${this.name} store prefix ${prefix}`);
    return this.inner.list(prefix);
  }
  async delete(key: string): Promise<void> {
    this.refuse("delete", `${this.name} store key ${key}`);
  }
}
