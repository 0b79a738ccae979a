import { Duration, Token } from "aws-cdk-lib";
import * as sqs from "aws-cdk-lib/aws-sqs";
import { Construct } from "constructs";
import { InvalidPropError, requireDurationRange, requireRange } from "./validate.ts";

/** How long a consumer may hold one message, and how long SQS hides it from others meanwhile. */
export interface QueueTiming {
  /** Longest time the consumer takes before it deletes (or extends) a received message. */
  readonly consumerTimeout: Duration;
  /**
   * Visibility timeout of the queue; must be at least `consumerTimeout`, or a message still
   * being processed would be delivered a second time.
   * @default - consumerTimeout plus one minute of slack, at most 12 hours
   */
  readonly visibilityTimeout?: Duration;
}

/** Props of {@link Messaging}. */
export interface MessagingProps {
  /** Queue names are `<prefix>-rollout-requests`, `-trajectories`, `-policy-events` (as shared/config's TransportConfig). */
  readonly queuePrefix: string;
  /** Consumer: rollout workers (one episode per message). */
  readonly rolloutRequests: QueueTiming;
  /** Consumer: the trainer (acknowledges after the step that used the trajectory). */
  readonly trajectories: QueueTiming;
  /** Consumers: policy servers and the evaluator (a cheap reload trigger). */
  readonly policyEvents: QueueTiming;
  /**
   * Deliveries before a message moves to its dead-letter queue.
   * @default - 5
   */
  readonly maxReceiveCount?: number;
  /**
   * How long undelivered messages stay in the main queues.
   * @default - 4 days
   */
  readonly retentionPeriod?: Duration;
}

const MAX_VISIBILITY = Duration.hours(12);
const QUEUE_PREFIX = /^[A-Za-z0-9_-]{1,40}$/;

/** A queue and its dead-letter queue. */
export interface QueueWithDlq {
  readonly queue: sqs.IQueue;
  readonly deadLetterQueue: sqs.IQueue;
  /** The visibility timeout the queue was created with. */
  readonly visibilityTimeout: Duration;
}

/**
 * The pipeline's three event queues, each with an encrypted, TLS-only queue and a dead-letter
 * queue that receives messages after `maxReceiveCount` failed deliveries.
 */
export class Messaging extends Construct {
  readonly rolloutRequests: QueueWithDlq;
  readonly trajectories: QueueWithDlq;
  readonly policyEvents: QueueWithDlq;
  readonly maxReceiveCount: number;

  constructor(scope: Construct, id: string, props: MessagingProps) {
    super(scope, id);
    if (!Token.isUnresolved(props.queuePrefix) && !QUEUE_PREFIX.test(props.queuePrefix))
      throw new InvalidPropError(
        `Messaging: queuePrefix must be 1-40 letters, digits, '-' or '_', got "${props.queuePrefix}"`,
      );
    this.maxReceiveCount = props.maxReceiveCount ?? 5;
    requireRange("Messaging", "maxReceiveCount", this.maxReceiveCount, 1, 1000);
    const retentionPeriod = props.retentionPeriod ?? Duration.days(4);
    requireDurationRange("Messaging", "retentionPeriod", retentionPeriod, Duration.minutes(1), Duration.days(14));

    this.rolloutRequests = this.queue(
      "RolloutRequests",
      `${props.queuePrefix}-rollout-requests`,
      props.rolloutRequests,
      retentionPeriod,
    );
    this.trajectories = this.queue(
      "Trajectories",
      `${props.queuePrefix}-trajectories`,
      props.trajectories,
      retentionPeriod,
    );
    this.policyEvents = this.queue(
      "PolicyEvents",
      `${props.queuePrefix}-policy-events`,
      props.policyEvents,
      retentionPeriod,
    );
  }

  private queue(id: string, name: string, timing: QueueTiming, retentionPeriod: Duration): QueueWithDlq {
    const owner = `Messaging(${name})`;
    requireDurationRange(owner, "consumerTimeout", timing.consumerTimeout, Duration.seconds(1), MAX_VISIBILITY);
    const visibilityTimeout =
      timing.visibilityTimeout ??
      Duration.seconds(Math.min(timing.consumerTimeout.toSeconds() + 60, MAX_VISIBILITY.toSeconds()));
    requireDurationRange(owner, "visibilityTimeout", visibilityTimeout, Duration.seconds(0), MAX_VISIBILITY);
    if (visibilityTimeout.toSeconds() < timing.consumerTimeout.toSeconds())
      throw new InvalidPropError(
        `${owner}: visibilityTimeout must be at least the consumer's timeout (${timing.consumerTimeout.toSeconds()} s) ` +
          `and at most ${MAX_VISIBILITY.toSeconds()} s, got ${visibilityTimeout.toSeconds()} s`,
      );
    const deadLetterQueue = new sqs.Queue(this, `${id}Dlq`, {
      queueName: `${name}-dlq`,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // The longest SQS allows, so failures can be inspected and redriven.
      retentionPeriod: Duration.days(14),
    });
    const queue = new sqs.Queue(this, id, {
      queueName: name,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      visibilityTimeout,
      retentionPeriod,
      deadLetterQueue: { queue: deadLetterQueue, maxReceiveCount: this.maxReceiveCount },
    });
    return { queue, deadLetterQueue, visibilityTimeout };
  }
}
