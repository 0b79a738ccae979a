import { CfnOutput, Stack, type StackProps } from "aws-cdk-lib";
import type { Construct } from "constructs";
import { Messaging, type MessagingProps } from "../constructs/messaging.ts";

/** Props of {@link MessagingStack}. */
export interface MessagingStackProps extends StackProps {
  readonly messaging: MessagingProps;
}

/** The pipeline's queues and their dead-letter queues. */
export class MessagingStack extends Stack {
  readonly messaging: Messaging;

  constructor(scope: Construct, id: string, props: MessagingStackProps) {
    super(scope, id, props);
    this.messaging = new Messaging(this, "Messaging", props.messaging);
    new CfnOutput(this, "RolloutRequestsQueueUrl", { value: this.messaging.rolloutRequests.queue.queueUrl });
    new CfnOutput(this, "TrajectoriesQueueUrl", { value: this.messaging.trajectories.queue.queueUrl });
    new CfnOutput(this, "PolicyEventsQueueUrl", { value: this.messaging.policyEvents.queue.queueUrl });
  }
}
