import { z } from "zod";
import { type ChatMessage, JsonSchemaObject } from "../../shared/protocol/openai.ts";

/**
 * What the gateway accepts: its session API and the OpenAI chat-completions request as agents
 * written against the `openai` SDK (or LangChain, ...) send it. Fields those clients send that
 * change nothing here (`user`, `parallel_tool_calls`, ...) are accepted and ignored; anything
 * that would change what is sampled or recorded is validated.
 */

/** Ids that become object-key segments (as shared/protocol/messages.ts requires of group ids). */
export const SafeId = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[A-Za-z0-9][A-Za-z0-9._:=+@-]*$/, "letters, digits and . _ : = + @ - only, starting with a letter or digit");

/** `POST /v1/sessions` (admin key). */
export const CreateSessionBody = z
  .object({
    /** Task name for metrics and advantage normalization. @default "gateway" */
    task: SafeId.default("gateway"),
    groupId: SafeId.optional(),
    groupSize: z.number().int().min(1).max(256).optional(),
    metadata: z
      .record(z.string().max(64), z.union([z.string().max(1024), z.number(), z.boolean()]))
      .refine((m) => Object.keys(m).length <= 32, "at most 32 entries")
      .optional(),
  })
  .strict()
  .superRefine((body, ctx) => {
    if ((body.groupId === undefined) !== (body.groupSize === undefined))
      ctx.addIssue({
        code: "custom",
        path: [body.groupId === undefined ? "groupId" : "groupSize"],
        message: "groupId and groupSize come together: a group is released once groupSize sessions have ended",
      });
  });
export type CreateSessionBody = z.infer<typeof CreateSessionBody>;

/** `POST /v1/sessions/<id>/reward` (session key): the session's reward, or one call's. */
export const RewardBody = z
  .object({
    reward: z.number().finite().min(-1e6).max(1e6),
    completionId: z.string().min(1).max(128).optional(),
  })
  .strict();
export type RewardBody = z.infer<typeof RewardBody>;

/** `POST /v1/sessions/<id>/end`: an empty body or `{}`. */
export const EndBody = z.object({}).strict();

/** Message content as the SDK may send it: a string, null, or text parts (joined). */
const Content = z.union([
  z.string(),
  z.null(),
  z
    .array(z.object({ type: z.literal("text"), text: z.string() }))
    .transform((parts) => parts.map((p) => p.text).join("")),
]);

const IncomingToolCall = z.object({
  id: z.string().min(1).max(256),
  type: z.literal("function").default("function"),
  function: z.object({ name: z.string().min(1).max(256), arguments: z.string() }),
});

const IncomingMessage = z.discriminatedUnion("role", [
  z.object({ role: z.literal("system"), content: Content }),
  z.object({ role: z.literal("developer"), content: Content }),
  z.object({ role: z.literal("user"), content: Content }),
  z.object({
    role: z.literal("assistant"),
    content: Content.optional(),
    tool_calls: z.array(IncomingToolCall).optional(),
  }),
  z.object({
    role: z.literal("tool"),
    content: Content,
    tool_call_id: z.string().max(256),
    name: z.string().optional(),
  }),
]);

/** The incoming message in our ChatMessage shape (`developer` is the newer name of `system`). */
function normalized(message: z.infer<typeof IncomingMessage>): ChatMessage {
  switch (message.role) {
    case "system":
    case "developer":
      return { role: "system", content: message.content ?? "" };
    case "user":
      return { role: "user", content: message.content ?? "" };
    case "tool":
      return {
        role: "tool",
        content: message.content ?? "",
        tool_call_id: message.tool_call_id,
        ...(message.name === undefined ? {} : { name: message.name }),
      };
    case "assistant":
      return {
        role: "assistant",
        content: message.content ?? null,
        ...(message.tool_calls && message.tool_calls.length > 0 ? { tool_calls: message.tool_calls } : {}),
      };
  }
}

const IncomingTool = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string().min(1).max(256),
    description: z.string().default(""),
    parameters: JsonSchemaObject.default({ type: "object", properties: {} }),
  }),
});

/** `<baseUrl>/chat/completions` (session key). */
export const GatewayChatRequest = z.object({
  model: z.string().max(256).optional(),
  messages: z
    .array(IncomingMessage)
    .min(1)
    .max(4096)
    .transform((list) => list.map(normalized)),
  tools: z.array(IncomingTool).max(128).optional(),
  tool_choice: z.union([z.literal("auto"), z.literal("none"), z.literal("required"), z.object({})]).optional(),
  /** Recorded but not used: the gateway samples with rollout.temperature, which the trainer's ratio assumes. */
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  max_tokens: z.number().int().positive().nullable().optional(),
  max_completion_tokens: z.number().int().positive().nullable().optional(),
  seed: z.number().int().nullable().optional(),
  n: z.literal(1, "the gateway records one completion per call: n must be 1").nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.object({ include_usage: z.boolean().optional() }).nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  /** vLLM's extension: answer with `prompt_token_ids` and `choices[].token_ids`. */
  return_token_ids: z.boolean().optional(),
  parallel_tool_calls: z.boolean().optional(),
  user: z.string().max(256).optional(),
});
export type GatewayChatRequest = z.infer<typeof GatewayChatRequest>;
