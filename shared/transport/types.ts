/**
 * The two transport interfaces every role talks to. Implementations (`local`, `aws`) share one
 * conformance suite, so a role behaves the same on the embedded default, moto/LocalStack and AWS.
 * Delivery is at-least-once: consumers must be idempotent.
 */

export interface ReceivedMessage {
  /** Stable id of the message (same across redeliveries). */
  readonly id: string;
  /** Opaque handle for delete/changeVisibility of *this* delivery. */
  readonly receiptHandle: string;
  readonly body: string;
  /** 1 on first delivery. */
  readonly receiveCount: number;
}

export interface ReceiveOptions {
  /** Most messages to return (1..10, as SQS). @default 1 */
  maxMessages?: number;
  /** Long-poll: wait up to this many seconds for a first message (0..20). @default 0 */
  waitSeconds?: number;
  /** Hide received messages from other consumers for this long. @default the queue's own */
  visibilityTimeoutSeconds?: number;
}

/** Reason of a dead letter whose deliveries ran out without a `fail` (e.g. its consumers crashed). */
export const MAX_RECEIVE_COUNT_EXCEEDED = "maxReceiveCount exceeded";

export interface DeadLetter {
  readonly id: string;
  readonly body: string;
  readonly receiveCount: number;
  /** Why it failed, as given to `fail` (or "maxReceiveCount exceeded"). */
  readonly reason: string;
}

export interface Queue {
  readonly name: string;
  send(body: string): Promise<string>;
  sendBatch(bodies: readonly string[]): Promise<string[]>;
  receive(options?: ReceiveOptions): Promise<ReceivedMessage[]>;
  delete(receiptHandle: string): Promise<void>;
  changeVisibility(receiptHandle: string, visibilityTimeoutSeconds: number): Promise<void>;
  /**
   * Records why processing failed and makes the message visible again at once. After
   * maxReceiveCount deliveries it moves to the dead-letter queue with the last reason.
   */
  fail(receiptHandle: string, reason: string): Promise<void>;
  /** Visible + in flight messages, approximately (as SQS reports it). */
  approximateDepth(): Promise<{ visible: number; inFlight: number }>;
  /** Messages moved to the dead-letter queue, with their failure reasons. */
  deadLetters(max?: number): Promise<DeadLetter[]>;
  close(): Promise<void>;
}

export interface ObjectInfo {
  readonly key: string;
  readonly size: number;
  readonly lastModified: Date;
}

export interface ObjectStore {
  put(key: string, body: Uint8Array | string): Promise<void>;
  /** Writes only when `key` does not exist yet; returns false (and writes nothing) otherwise. */
  putIfAbsent(key: string, body: Uint8Array | string): Promise<boolean>;
  /** Returns undefined when the key does not exist. */
  get(key: string): Promise<Uint8Array | undefined>;
  getText(key: string): Promise<string | undefined>;
  head(key: string): Promise<ObjectInfo | undefined>;
  /** Keys under `prefix`, sorted lexicographically. */
  list(prefix: string): Promise<ObjectInfo[]>;
  delete(key: string): Promise<void>;
}

/** Queue names of one experiment; the same logical names map to SQS queue names or local tables. */
export const QUEUE_NAMES = ["rollout-requests", "trajectories", "policy-events"] as const;
export type QueueName = (typeof QUEUE_NAMES)[number];

export interface Transport {
  queue(name: QueueName): Queue;
  /** `trajectories` or `checkpoints`. */
  store(name: "trajectories" | "checkpoints"): ObjectStore;
  close(): Promise<void>;
}
