/**
 * The two transport interfaces every role talks to. Implementations (`local`, `aws`) share one
 * conformance suite, so a role behaves the same on the embedded default, moto/LocalStack and AWS.
 * Delivery is at-least-once: consumers must be idempotent.
 */

/** One delivery of a message. */
export interface ReceivedMessage {
  /** Stable id of the message (same across redeliveries). */
  readonly id: string;
  /** Opaque handle for delete/changeVisibility of *this* delivery. */
  readonly receiptHandle: string;
  readonly body: string;
  /** 1 on first delivery. */
  readonly receiveCount: number;
}

/** Options of `Queue.receive`, validated with SQS's limits by both implementations. */
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

/** A message that ran out of deliveries, as read back from the dead-letter queue. */
export interface DeadLetter {
  readonly id: string;
  readonly body: string;
  readonly receiveCount: number;
  /** Why it failed, as given to `fail` (or "maxReceiveCount exceeded"). */
  readonly reason: string;
}

/** A durable, at-least-once queue with SQS semantics (visibility timeout, receive count, dead-letter queue). */
export interface Queue {
  readonly name: string;
  /** Sends one message; returns its id. Bodies are non-empty strings of at most 256 KiB. */
  send(body: string): Promise<string>;
  /** Sends many messages (split into SQS batches of 10 as needed); returns their ids in order. */
  sendBatch(bodies: readonly string[]): Promise<string[]>;
  /** Takes up to `maxMessages` visible messages, hiding each for the visibility timeout; [] when none came in time. */
  receive(options?: ReceiveOptions): Promise<ReceivedMessage[]>;
  /** Acknowledges a delivery. Deleting twice or with a stale handle is not an error. */
  delete(receiptHandle: string): Promise<void>;
  /** Hides an in-flight delivery for `visibilityTimeoutSeconds` from now (0: visible at once); throws ReceiptHandleError when it is no longer in flight. */
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
  /** Releases this queue; the transport owns shared connections and closes them. */
  close(): Promise<void>;
}

/** What `head` and `list` report about one object. */
export interface ObjectInfo {
  readonly key: string;
  readonly size: number;
  readonly lastModified: Date;
}

/** A flat key/value store of immutable-or-replaced objects; keys are relative '/'-separated paths. */
export interface ObjectStore {
  /** Writes (or replaces) an object atomically: readers see the old or the new body, never a part. */
  put(key: string, body: Uint8Array | string): Promise<void>;
  /** Writes only when `key` does not exist yet; returns false (and writes nothing) otherwise. */
  putIfAbsent(key: string, body: Uint8Array | string): Promise<boolean>;
  /** Returns undefined when the key does not exist. */
  get(key: string): Promise<Uint8Array | undefined>;
  /** `get` decoded as UTF-8. */
  getText(key: string): Promise<string | undefined>;
  /** Size and modification time, or undefined when the key does not exist. */
  head(key: string): Promise<ObjectInfo | undefined>;
  /** Keys under `prefix`, sorted lexicographically. */
  list(prefix: string): Promise<ObjectInfo[]>;
  /** Removes an object; removing a missing key is not an error. */
  delete(key: string): Promise<void>;
}

/** Queue names of one experiment; the same logical names map to SQS queue names or local tables. */
export const QUEUE_NAMES = ["rollout-requests", "trajectories", "policy-events"] as const;
/** One of QUEUE_NAMES. */
export type QueueName = (typeof QUEUE_NAMES)[number];

/** The two object stores of an experiment. */
export type StoreName = "trajectories" | "checkpoints";

/** Everything a role needs to talk to the pipeline: the experiment's queues and object stores. */
export interface Transport {
  queue(name: QueueName): Queue;
  /** `trajectories` or `checkpoints`. */
  store(name: StoreName): ObjectStore;
  /**
   * Removes what writes leave behind once done (the local stores' empty temp folders). Only for
   * the run's owner after every writer has stopped: another process may be mid-write otherwise.
   */
  tidy(): Promise<void>;
  close(): Promise<void>;
}
