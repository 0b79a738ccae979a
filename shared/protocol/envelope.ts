import type { z } from "zod";
import { parseJsonOrThrow, ValidationError } from "../errors.ts";

/**
 * Parses a queue message body as `schema` and checks that it belongs to this role's experiment:
 * one experiment's roles may share queues with another's by mistake, and a message of the other
 * experiment must be rejected, not trained or rolled out. Throws ValidationError naming the
 * failing field; the caller fails the message (to the dead-letter queue with the reason).
 *
 * @example const request = parseExperimentMessage(RolloutRequest, message.body, "RolloutRequest", config.experimentId);
 */
export function parseExperimentMessage<S extends z.ZodType<{ experimentId: string }>>(
  schema: S,
  body: string,
  what: string,
  experimentId: string,
): z.output<S> {
  const message = parseJsonOrThrow(schema, body, what);
  if (message.experimentId !== experimentId)
    throw new ValidationError(what, [
      { path: "experimentId", message: `"${message.experimentId}" is not this role's experiment "${experimentId}"` },
    ]);
  return message;
}
