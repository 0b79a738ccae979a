/**
 * The AWS transport: SQS queues and S3 buckets through SDK v3, against real AWS or any AWS-API
 * endpoint (moto server, LocalStack) given by `endpoint`. Queue `<name>` is the SQS queue
 * `${queuePrefix}-${name}` with dead-letter queue `${queuePrefix}-${name}-dlq` and a redrive policy
 * of `maxReceiveCount`; in AWS the CDK stack creates them, elsewhere `ensureResources()` does.
 */
import {
  type BucketLocationConstraint,
  CreateBucketCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from "@aws-sdk/client-s3";
import {
  ChangeMessageVisibilityBatchCommand,
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  type Message,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SetQueueAttributesCommand,
  SQSClient,
} from "@aws-sdk/client-sqs";
import type { TransportConfig } from "../config/transport.ts";
import { sleep } from "../sleep.ts";
import {
  AccessDeniedError,
  isTransientTransportError,
  MissingResourceError,
  ReceiptHandleError,
  TransportError,
} from "./errors.ts";
import {
  type DeadLetter,
  MAX_RECEIVE_COUNT_EXCEEDED,
  type ObjectInfo,
  type ObjectStore,
  QUEUE_NAMES,
  type Queue,
  type QueueName,
  type ReceivedMessage,
  type ReceiveOptions,
  type Transport,
} from "./types.ts";
import {
  assertValidBodies,
  assertValidBody,
  assertValidObjectKey,
  assertValidPrefix,
  normalizeReason,
  parseReceiveOptions,
  parseVisibilityTimeout,
  QUEUE_LIMITS,
} from "./validate.ts";

/** Message attributes our own dead-lettering (`fail`) puts on the DLQ copy. */
const REASON_ATTRIBUTE = "reason";
const RECEIVE_COUNT_ATTRIBUTE = "receiveCount";
const ORIGINAL_ID_ATTRIBUTE = "originalMessageId";
/** How long `deadLetters()` hides the DLQ messages it is reading before making them visible again. */
const PEEK_VISIBILITY_SECONDS = 30;
/** In-flight bookkeeping older than SQS's longest visibility timeout is useless: drop it. */
const IN_FLIGHT_TTL_MS = QUEUE_LIMITS.maxVisibilityTimeoutSeconds * 1000;
const IN_FLIGHT_MAX_ENTRIES = 100_000;

/** SQS queue names of logical queue `name`. */
export function sqsQueueNames(queuePrefix: string, name: string): { main: string; dlq: string } {
  return { main: `${queuePrefix}-${name}`, dlq: `${queuePrefix}-${name}-dlq` };
}

/**
 * How long a connection may take to open, and a socket may stay silent, before the SDK gives the
 * request up (a retryable TimeoutError). Without them a connection the server never answers hangs
 * a role for good: the SDK's own default is no timeout. The silence allowed is well above SQS's
 * longest long poll (20 s), and it bounds silence rather than the whole request, so a large
 * checkpoint upload is not cut off.
 */
export const AWS_CONNECTION_TIMEOUT_MS = 10_000;
export const AWS_SOCKET_IDLE_TIMEOUT_MS = 60_000;

/** The least time one attempt at creating the queues and buckets is given (moto answers in well under 1 s). */
const SHORTEST_RESOURCES_ATTEMPT_MS = 5_000;

/** The two SDK clients of one transport, built from the config (endpoint override, path-style S3). */
export function createAwsClients(
  config: TransportConfig,
  timeouts: { connectionMs: number; idleMs: number } = {
    connectionMs: AWS_CONNECTION_TIMEOUT_MS,
    idleMs: AWS_SOCKET_IDLE_TIMEOUT_MS,
  },
): { sqs: SQSClient; s3: S3Client } {
  const common = {
    region: config.region,
    ...(config.endpoint ? { endpoint: config.endpoint } : {}),
    requestHandler: { connectionTimeout: timeouts.connectionMs, socketTimeout: timeouts.idleMs },
  };
  const sqs = new SQSClient(common);
  const s3 = new S3Client({ ...common, forcePathStyle: true });
  sqs.middlewareStack.add(
    (next, context) => async (args) => {
      try {
        return await next(args);
      } catch (error) {
        throw namedDenial(
          error,
          "sqs",
          context.commandName ?? "",
          args.input as Record<string, unknown>,
          config.region,
        );
      }
    },
    { step: "initialize", name: "agentrlNameAccessDenials" },
  );
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      try {
        return await next(args);
      } catch (error) {
        throw namedDenial(error, "s3", context.commandName ?? "", args.input as Record<string, unknown>, config.region);
      }
    },
    { step: "initialize", name: "agentrlNameAccessDenials" },
  );
  return { sqs, s3 };
}

/** IAM action of an SDK command (batch calls are authorized as their single form, HEAD as GET). */
export function iamActionOf(service: "sqs" | "s3", commandName: string): string {
  const operation = commandName.replace(/Command$/, "").replace(/Batch$/, "");
  if (service === "s3") {
    if (operation === "HeadObject") return "s3:GetObject";
    if (operation === "ListObjectsV2" || operation === "HeadBucket") return "s3:ListBucket";
  }
  return `${service}:${operation}`;
}

/** The ARN an SDK call acts on, from its input (queue URL or name; bucket and key). */
export function resourceArnOf(service: "sqs" | "s3", input: Record<string, unknown>, region: string): string {
  if (service === "s3")
    return `arn:aws:s3:::${String(input.Bucket ?? "*")}${typeof input.Key === "string" ? `/${input.Key}` : ""}`;
  if (typeof input.QueueUrl === "string") {
    const [account, name] = new URL(input.QueueUrl).pathname.split("/").filter(Boolean).slice(-2);
    return `arn:aws:sqs:${region}:${account ?? "*"}:${name ?? "*"}`;
  }
  return `arn:aws:sqs:${region}:*:${String(input.QueueName ?? "*")}`;
}

/**
 * An SDK error; when it is an IAM denial, an AccessDeniedError naming the IAM action and the
 * resource (the raw S3 denial names neither), also written as one JSON line on stderr with the
 * container's role, since some callers swallow errors of best-effort calls.
 */
function namedDenial(
  error: unknown,
  service: "sqs" | "s3",
  commandName: string,
  input: Record<string, unknown>,
  region: string,
): unknown {
  const name = errorName(error);
  if (name !== "AccessDenied" && name !== "AccessDeniedException" && httpStatus(error) !== 403) return error;
  const action = iamActionOf(service, commandName);
  const resource = resourceArnOf(service, input, region);
  const role = process.env.AGENTRL_ROLE ?? "this process";
  process.stderr.write(`${JSON.stringify({ event: "access-denied", role, action, resource })}\n`);
  return new AccessDeniedError(role, action, resource, { cause: error });
}

interface InFlight {
  readonly id: string;
  readonly body: string;
  readonly receiveCount: number;
  readonly at: number;
}

/**
 * One logical queue on SQS. Queue URLs are looked up on first use and cached.
 *
 * `fail` needs the body and receive count of the delivery; this object remembers them for the
 * messages it received. A handle received by another process still works, but then only makes the
 * message visible again (the redrive policy dead-letters it later, with reason "maxReceiveCount exceeded").
 */
export class AwsQueue implements Queue {
  private mainUrl?: Promise<string>;
  private dlqUrl?: Promise<string>;
  private readonly inFlight = new Map<string, InFlight>();
  readonly sqsNames: { main: string; dlq: string };

  constructor(
    private readonly sqs: SQSClient,
    readonly name: string,
    private readonly config: Pick<TransportConfig, "queuePrefix" | "maxReceiveCount" | "endpoint">,
  ) {
    this.sqsNames = sqsQueueNames(config.queuePrefix, name);
  }

  /** URL of the main queue; throws MissingResourceError when it does not exist. */
  url(): Promise<string> {
    this.mainUrl ??= this.lookUp(this.sqsNames.main).catch((error: unknown) => {
      this.mainUrl = undefined;
      throw error;
    });
    return this.mainUrl;
  }

  /** URL of the dead-letter queue; throws MissingResourceError when it does not exist. */
  deadLetterUrl(): Promise<string> {
    this.dlqUrl ??= this.lookUp(this.sqsNames.dlq).catch((error: unknown) => {
      this.dlqUrl = undefined;
      throw error;
    });
    return this.dlqUrl;
  }

  private async lookUp(queueName: string): Promise<string> {
    try {
      const out = await this.sqs.send(new GetQueueUrlCommand({ QueueName: queueName }));
      if (!out.QueueUrl) throw new MissingResourceError(`SQS returned no URL for queue ${queueName}`);
      return out.QueueUrl;
    } catch (error) {
      if (errorName(error) === "QueueDoesNotExist" || errorName(error) === "AWS.SimpleQueueService.NonExistentQueue")
        throw new MissingResourceError(
          `SQS queue ${queueName} does not exist${this.config.endpoint ? ` at ${this.config.endpoint}` : ""}; create it with ensureResources() (moto/LocalStack) or deploy the CDK stack`,
          { cause: error },
        );
      throw error;
    }
  }

  async send(body: string): Promise<string> {
    assertValidBody(body);
    const out = await this.sqs.send(new SendMessageCommand({ QueueUrl: await this.url(), MessageBody: body }));
    return out.MessageId!;
  }

  async sendBatch(bodies: readonly string[]): Promise<string[]> {
    assertValidBodies(bodies);
    const ids: string[] = [];
    for (const chunk of chunkForBatch(bodies)) {
      const out = await this.sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: await this.url(),
          Entries: chunk.map((body, index) => ({ Id: String(index), MessageBody: body })),
        }),
      );
      if (out.Failed && out.Failed.length > 0) {
        const first = out.Failed[0]!;
        throw new TransportError(
          `queue ${this.name}: ${out.Failed.length} of ${chunk.length} messages not sent (${first.Code}: ${first.Message ?? ""}); ${ids.length} sent before`,
        );
      }
      const byEntry = new Map((out.Successful ?? []).map((entry) => [entry.Id, entry.MessageId!]));
      for (const index of chunk.keys()) ids.push(byEntry.get(String(index))!);
    }
    return ids;
  }

  async receive(options?: ReceiveOptions): Promise<ReceivedMessage[]> {
    const parsed = parseReceiveOptions(options);
    const out = await this.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: await this.url(),
        MaxNumberOfMessages: parsed.maxMessages,
        WaitTimeSeconds: parsed.waitSeconds,
        ...(parsed.visibilityTimeoutSeconds === undefined
          ? {}
          : { VisibilityTimeout: parsed.visibilityTimeoutSeconds }),
        MessageSystemAttributeNames: ["ApproximateReceiveCount"],
      }),
    );
    const now = Date.now();
    this.pruneInFlight(now);
    return (out.Messages ?? []).map((message) => {
      const received = {
        id: message.MessageId!,
        receiptHandle: message.ReceiptHandle!,
        body: message.Body ?? "",
        receiveCount: Number(message.Attributes?.ApproximateReceiveCount ?? "1"),
      };
      this.inFlight.set(received.receiptHandle, { ...received, at: now });
      return received;
    });
  }

  private pruneInFlight(now: number): void {
    if (this.inFlight.size < IN_FLIGHT_MAX_ENTRIES / 2) {
      // cheap path: only drop the oldest entries (Map keeps insertion order)
      for (const [handle, entry] of this.inFlight) {
        if (now - entry.at < IN_FLIGHT_TTL_MS) break;
        this.inFlight.delete(handle);
      }
      return;
    }
    const excess = this.inFlight.size - IN_FLIGHT_MAX_ENTRIES / 2;
    let dropped = 0;
    for (const handle of this.inFlight.keys()) {
      if (dropped++ >= excess) break;
      this.inFlight.delete(handle);
    }
  }

  async delete(receiptHandle: string): Promise<void> {
    this.inFlight.delete(receiptHandle);
    try {
      await this.sqs.send(new DeleteMessageCommand({ QueueUrl: await this.url(), ReceiptHandle: receiptHandle }));
    } catch (error) {
      // Deleting twice, or with a handle that no longer matches, is not an error (at-least-once).
      if (errorName(error) !== "ReceiptHandleIsInvalid") throw error;
    }
  }

  async changeVisibility(receiptHandle: string, visibilityTimeoutSeconds: number): Promise<void> {
    const seconds = parseVisibilityTimeout(visibilityTimeoutSeconds);
    try {
      await this.sqs.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl: await this.url(),
          ReceiptHandle: receiptHandle,
          VisibilityTimeout: seconds,
        }),
      );
    } catch (error) {
      const name = errorName(error);
      if (name === "ReceiptHandleIsInvalid" || name === "MessageNotInflight" || name === "InvalidParameterValue")
        throw new ReceiptHandleError(
          `queue ${this.name}: receipt handle is not in flight any more (${name}: ${(error as Error).message})`,
          { cause: error },
        );
      throw error;
    }
  }

  async fail(receiptHandle: string, reason: string): Promise<void> {
    const why = normalizeReason(reason);
    const delivery = this.inFlight.get(receiptHandle);
    this.inFlight.delete(receiptHandle);
    if (delivery && delivery.receiveCount >= this.config.maxReceiveCount) {
      // Dead-letter it ourselves so the reason travels with it (SQS's redrive would drop it).
      await this.sqs.send(
        new SendMessageCommand({
          QueueUrl: await this.deadLetterUrl(),
          MessageBody: delivery.body,
          MessageAttributes: {
            [REASON_ATTRIBUTE]: { DataType: "String", StringValue: why },
            [RECEIVE_COUNT_ATTRIBUTE]: { DataType: "Number", StringValue: String(delivery.receiveCount) },
            [ORIGINAL_ID_ATTRIBUTE]: { DataType: "String", StringValue: delivery.id },
          },
        }),
      );
      await this.delete(receiptHandle);
      return;
    }
    try {
      await this.changeVisibility(receiptHandle, 0);
    } catch (error) {
      if (!(error instanceof ReceiptHandleError)) throw error; // stale: someone else owns the message now
    }
  }

  async approximateDepth(): Promise<{ visible: number; inFlight: number }> {
    const out = await this.sqs.send(
      new GetQueueAttributesCommand({
        QueueUrl: await this.url(),
        AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
      }),
    );
    return {
      visible: Number(out.Attributes?.ApproximateNumberOfMessages ?? 0),
      inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0),
    };
  }

  /**
   * Reads (without consuming) up to `max` dead letters: receives them with a short visibility
   * timeout, then makes them visible again.
   */
  async deadLetters(max = 100): Promise<DeadLetter[]> {
    const url = await this.deadLetterUrl();
    const seen = new Map<string, Message>();
    // A single-server endpoint (moto, LocalStack) answers a short poll completely; SQS needs a long poll.
    const waitSeconds = this.config.endpoint ? 0 : 1;
    try {
      while (seen.size < max) {
        const out = await this.sqs.send(
          new ReceiveMessageCommand({
            QueueUrl: url,
            MaxNumberOfMessages: Math.min(QUEUE_LIMITS.maxMessagesPerReceive, max - seen.size),
            WaitTimeSeconds: waitSeconds,
            VisibilityTimeout: PEEK_VISIBILITY_SECONDS,
            MessageAttributeNames: ["All"],
          }),
        );
        const fresh = (out.Messages ?? []).filter((message) => !seen.has(message.MessageId!));
        if (fresh.length === 0) break;
        for (const message of fresh) seen.set(message.MessageId!, message);
      }
    } finally {
      await this.releasePeeked(url, [...seen.values()]);
    }
    return [...seen.values()].map((message) => {
      const attributes = message.MessageAttributes ?? {};
      return {
        id: attributes[ORIGINAL_ID_ATTRIBUTE]?.StringValue ?? message.MessageId!,
        body: message.Body ?? "",
        receiveCount: Number(attributes[RECEIVE_COUNT_ATTRIBUTE]?.StringValue ?? this.config.maxReceiveCount),
        reason: attributes[REASON_ATTRIBUTE]?.StringValue ?? MAX_RECEIVE_COUNT_EXCEEDED,
      };
    });
  }

  private async releasePeeked(url: string, messages: Message[]): Promise<void> {
    for (let start = 0; start < messages.length; start += QUEUE_LIMITS.maxBatchEntries) {
      const chunk = messages.slice(start, start + QUEUE_LIMITS.maxBatchEntries);
      await this.sqs.send(
        new ChangeMessageVisibilityBatchCommand({
          QueueUrl: url,
          Entries: chunk.map((message, index) => ({
            Id: String(index),
            ReceiptHandle: message.ReceiptHandle!,
            VisibilityTimeout: 0,
          })),
        }),
      );
    }
  }

  /** No-op: the owning transport destroys the shared SDK client. */
  async close(): Promise<void> {}
}

/** One S3 bucket as an ObjectStore. */
export class AwsObjectStore implements ObjectStore {
  constructor(
    private readonly s3: S3Client,
    readonly bucket: string,
  ) {}

  async put(key: string, body: Uint8Array | string): Promise<void> {
    assertValidObjectKey(key);
    await this.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body }));
  }

  /**
   * S3 conditional write (`If-None-Match: *`): S3 (and moto 5.2.1) answer 412 when the key
   * exists. A 409 means a concurrent conditional write to the same key was in progress: retry,
   * and the next attempt sees the winner's object. S3 makes the check and the write one atomic
   * step; moto 5.2.1 checks then writes without a lock, so on moto two racing calls can both win.
   */
  async putIfAbsent(key: string, body: Uint8Array | string): Promise<boolean> {
    assertValidObjectKey(key);
    for (let attempt = 0; ; attempt++) {
      try {
        await this.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: body, IfNoneMatch: "*" }));
        return true;
      } catch (error) {
        const status = httpStatus(error);
        if (status === 412 || errorName(error) === "PreconditionFailed") return false;
        if (status === 409 && attempt < 5) {
          await new Promise((resolve) => setTimeout(resolve, 50 * 2 ** attempt));
          continue;
        }
        throw error;
      }
    }
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    assertValidObjectKey(key);
    try {
      const out = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
      return out.Body ? await out.Body.transformToByteArray() : new Uint8Array();
    } catch (error) {
      if (errorName(error) === "NoSuchKey" || httpStatus(error) === 404) return undefined;
      throw error;
    }
  }

  async getText(key: string): Promise<string | undefined> {
    const data = await this.get(key);
    return data === undefined ? undefined : Buffer.from(data).toString("utf8");
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    assertValidObjectKey(key);
    try {
      const out = await this.s3.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
      return { key, size: out.ContentLength ?? 0, lastModified: out.LastModified ?? new Date(0) };
    } catch (error) {
      if (errorName(error) === "NotFound" || httpStatus(error) === 404) return undefined;
      throw error;
    }
  }

  async list(prefix: string): Promise<ObjectInfo[]> {
    assertValidPrefix(prefix);
    const out: ObjectInfo[] = [];
    let token: string | undefined;
    do {
      const page = await this.s3.send(
        new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, ContinuationToken: token }),
      );
      for (const item of page.Contents ?? [])
        out.push({ key: item.Key!, size: item.Size ?? 0, lastModified: item.LastModified ?? new Date(0) });
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    // S3 already returns keys in byte order; sort anyway so both implementations agree exactly.
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  async delete(key: string): Promise<void> {
    assertValidObjectKey(key);
    await this.s3.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: key }));
  }
}

/** SQS + S3 transport. Queues and stores are created on first use and cached. */
export class AwsTransport implements Transport {
  readonly sqs: SQSClient;
  readonly s3: S3Client;
  private readonly queues = new Map<string, AwsQueue>();
  private readonly stores = new Map<string, AwsObjectStore>();

  constructor(
    readonly config: TransportConfig,
    clients?: { sqs: SQSClient; s3: S3Client },
  ) {
    const built = clients ?? createAwsClients(config);
    this.sqs = built.sqs;
    this.s3 = built.s3;
  }

  queue(name: QueueName): AwsQueue {
    let queue = this.queues.get(name);
    if (!queue) {
      queue = new AwsQueue(this.sqs, name, this.config);
      this.queues.set(name, queue);
    }
    return queue;
  }

  store(name: "trajectories" | "checkpoints"): AwsObjectStore {
    let store = this.stores.get(name);
    if (!store) {
      store = new AwsObjectStore(
        this.s3,
        name === "trajectories" ? this.config.trajectoryBucket : this.config.checkpointBucket,
      );
      this.stores.set(name, store);
    }
    return store;
  }

  /**
   * Creates every queue (with its DLQ and redrive policy) and both buckets when missing; safe to
   * call again. For moto and LocalStack; in AWS the CDK stack owns these resources. An endpoint
   * that refuses connections or times out is tried again for `endpointWaitSeconds` (a server
   * started a moment before is not listening yet; `onWait` hears the first refusal), then the
   * call fails with one line naming the endpoint; so does a `signal` aborted during the wait.
   */
  async ensureResources(options: { onWait?: (reason: string) => void; signal?: AbortSignal } = {}): Promise<void> {
    const waitSeconds = this.config.endpointWaitSeconds;
    const started = Date.now();
    const deadline = started + waitSeconds * 1000;
    const endpoint = this.config.endpoint ?? `of ${this.config.region}`;
    /** Why the endpoint has not served us yet (the last attempt's failure). */
    let reason: string | undefined;
    const stopped = (cause?: unknown) =>
      new TransportError(`stopped while waiting for the AWS endpoint ${endpoint} (${reason ?? "no answer yet"})`, {
        cause,
      });
    for (let attempt = 0; ; attempt++) {
      if (options.signal?.aborted) throw stopped();
      // An endpoint that accepts connections and never answers would hold a request for the SDK's
      // own timeouts (a minute of silence, three tries): no attempt outlives the wait (or its
      // shortest attempt, for a wait of 0 or one nearly over), nor a stop.
      const attemptMs = Math.max(deadline - Date.now(), SHORTEST_RESOURCES_ATTEMPT_MS);
      const attemptTimeout = AbortSignal.timeout(attemptMs);
      const abortSignal = options.signal ? AbortSignal.any([options.signal, attemptTimeout]) : attemptTimeout;
      try {
        return await this.createResources(abortSignal);
      } catch (error) {
        if (options.signal?.aborted) throw stopped(error);
        const silent = attemptTimeout.aborted;
        if (!silent && !isTransientTransportError(error)) throw error;
        // A silent try lasts at least SHORTEST_RESOURCES_ATTEMPT_MS, longer than a short wait: say how long each took.
        reason = silent
          ? `no answer within ${Math.round(attemptMs / 1000)} s`
          : error instanceof Error
            ? error.message
            : String(error);
        if (Date.now() >= deadline) {
          const tried = Math.max(waitSeconds, Math.round((Date.now() - started) / 1000));
          throw new TransportError(
            `cannot reach the AWS endpoint ${endpoint} to create the queues and buckets: ${reason} (tried for ${tried} s; transport.endpointWaitSeconds is ${waitSeconds}; is moto or LocalStack running there?)`,
            { cause: error },
          );
        }
        if (attempt === 0) options.onWait?.(reason);
        await sleep(Math.min(250 * 2 ** attempt, 2000, Math.max(0, deadline - Date.now())), options.signal);
      }
    }
  }

  private async createResources(abortSignal: AbortSignal): Promise<void> {
    await Promise.all([
      ...QUEUE_NAMES.map((name) => this.ensureQueue(name, abortSignal)),
      ...[this.config.trajectoryBucket, this.config.checkpointBucket].map((bucket) =>
        this.ensureBucket(bucket, abortSignal),
      ),
    ]);
  }

  private async ensureQueue(name: QueueName, abortSignal: AbortSignal): Promise<void> {
    const names = sqsQueueNames(this.config.queuePrefix, name);
    const dlq = await this.sqs.send(new CreateQueueCommand({ QueueName: names.dlq }), { abortSignal });
    const dlqAttributes = await this.sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: dlq.QueueUrl!, AttributeNames: ["QueueArn"] }),
      { abortSignal },
    );
    const main = await this.sqs.send(new CreateQueueCommand({ QueueName: names.main }), { abortSignal });
    // Set attributes separately: CreateQueue refuses an existing queue whose attributes differ.
    await this.sqs.send(
      new SetQueueAttributesCommand({
        QueueUrl: main.QueueUrl!,
        Attributes: {
          VisibilityTimeout: String(this.config.visibilityTimeoutSeconds),
          RedrivePolicy: JSON.stringify({
            deadLetterTargetArn: dlqAttributes.Attributes!.QueueArn,
            maxReceiveCount: this.config.maxReceiveCount,
          }),
        },
      }),
      { abortSignal },
    );
  }

  private async ensureBucket(bucket: string, abortSignal: AbortSignal): Promise<void> {
    try {
      await this.s3.send(new HeadBucketCommand({ Bucket: bucket }), { abortSignal });
      return;
    } catch (error) {
      if (httpStatus(error) !== 404 && errorName(error) !== "NotFound") throw error;
    }
    try {
      await this.s3.send(
        new CreateBucketCommand({
          Bucket: bucket,
          ...(this.config.region === "us-east-1"
            ? {}
            : { CreateBucketConfiguration: { LocationConstraint: this.config.region as BucketLocationConstraint } }),
        }),
        { abortSignal },
      );
    } catch (error) {
      const name = errorName(error);
      if (name !== "BucketAlreadyOwnedByYou" && name !== "BucketAlreadyExists") throw error;
    }
  }

  /** Nothing to tidy: S3 writes leave no temporaries. */
  async tidy(): Promise<void> {}

  async close(): Promise<void> {
    this.sqs.destroy();
    this.s3.destroy();
  }
}

function errorName(error: unknown): string | undefined {
  return typeof error === "object" && error !== null && "name" in error ? String(error.name) : undefined;
}

function httpStatus(error: unknown): number | undefined {
  const metadata =
    typeof error === "object" && error !== null && "$metadata" in error
      ? (error.$metadata as { httpStatusCode?: number } | undefined)
      : undefined;
  return metadata?.httpStatusCode;
}

/** Splits bodies into SendMessageBatch calls: at most 10 entries and 256 KiB per call. */
function chunkForBatch(bodies: readonly string[]): string[][] {
  const chunks: string[][] = [];
  let current: string[] = [];
  let bytes = 0;
  for (const body of bodies) {
    const size = Buffer.byteLength(body);
    if (
      current.length === QUEUE_LIMITS.maxBatchEntries ||
      (current.length > 0 && bytes + size > QUEUE_LIMITS.maxBodyBytes)
    ) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(body);
    bytes += size;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}
