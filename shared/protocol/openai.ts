import { z } from "zod";

/**
 * The OpenAI chat-completions subset agentrl-ts speaks: enough for function calling with
 * log-probs, plus an `agentrl` extension on each choice (token ids, per-token log-probs and the
 * policy version of each token) that the official `openai` client passes through untouched.
 */

export const ToolCall = z.object({
  id: z.string().min(1),
  type: z.literal("function"),
  function: z.object({
    name: z.string().min(1),
    /** JSON text, as OpenAI sends it. */
    arguments: z.string(),
  }),
});
export type ToolCall = z.infer<typeof ToolCall>;

export const SystemMessage = z.object({ role: z.literal("system"), content: z.string() });
export const UserMessage = z.object({ role: z.literal("user"), content: z.string() });
export const AssistantMessage = z.object({
  role: z.literal("assistant"),
  content: z.string().nullable().default(null),
  tool_calls: z.array(ToolCall).optional(),
});
export const ToolMessage = z.object({
  role: z.literal("tool"),
  content: z.string(),
  tool_call_id: z.string(),
  name: z.string().optional(),
});

export const ChatMessage = z.discriminatedUnion("role", [SystemMessage, UserMessage, AssistantMessage, ToolMessage]);
export type ChatMessage = z.infer<typeof ChatMessage>;
export type AssistantMessage = z.infer<typeof AssistantMessage>;
export type ToolMessage = z.infer<typeof ToolMessage>;

/** JSON Schema of a tool's parameters; kept as an open object since it is schema, not data. */
export const JsonSchemaObject = z.record(z.string(), z.unknown());

export const ToolSpec = z.object({
  type: z.literal("function"),
  function: z.object({
    name: z.string().min(1),
    description: z.string().default(""),
    parameters: JsonSchemaObject,
  }),
});
export type ToolSpec = z.infer<typeof ToolSpec>;

/**
 * Response header naming the policy version that answered a chat completion; clients that read
 * only OpenAI/vLLM fields (no `agentrl` trace) take the version from it or from the model name.
 */
export const POLICY_VERSION_HEADER = "x-policy-version";

export const ChatCompletionRequest = z.object({
  model: z.string().default("agentrl"),
  messages: z.array(ChatMessage).min(1),
  tools: z.array(ToolSpec).optional(),
  tool_choice: z.union([z.literal("auto"), z.literal("none")]).optional(),
  temperature: z.number().min(0).max(2).default(1),
  top_p: z.number().gt(0).max(1).default(1),
  max_tokens: z.number().int().positive().optional(),
  seed: z.number().int().optional(),
  n: z.number().int().min(1).max(16).default(1),
  logprobs: z.boolean().default(false),
  /** vLLM's extension: answer with top-level `prompt_token_ids` and `choices[].token_ids`. */
  return_token_ids: z.boolean().optional(),
  stream: z.literal(false).optional(),
  /**
   * agentrl extension: the prompt as token ids, used instead of rendering `messages`, so a
   * multi-turn trajectory conditions on exactly the tokens it recorded (generated tokens are not
   * re-tokenized). `messages` are still validated and kept for logs.
   */
  agentrl: z
    .object({
      prompt_token_ids: z.array(z.number().int().nonnegative()).min(1).optional(),
      /**
       * The newest published version (sync mode): the server answers with its pool's version for it,
       * waiting a bounded time for it to load, and refuses (409) when it already serves a later one.
       */
      newest_version: z.number().int().nonnegative().optional(),
    })
    .strict()
    .optional(),
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

/** Per-token record of what generated each token; the rollout/trainer agreement check reads it. */
export const GenerationTrace = z.object({
  token_ids: z.array(z.number().int()),
  /** Full-vocabulary log_softmax(logits / temperature)[token]: what the trainer recomputes. */
  logprobs: z.array(z.number()),
  /**
   * Log-prob under the distribution each token was actually drawn from (top_p's nucleus
   * renormalized; 0 for greedy). Equal to `logprobs` without truncation. Absent from servers
   * that do not report it; the rollout worker then cannot record `sampled` behaviour log-probs.
   */
  sampled_logprobs: z.array(z.number()).optional(),
  policy_versions: z.array(z.number().int()),
  /** Prompt tokens the server fed the model (after any truncation it reports). */
  prompt_token_ids: z.array(z.number().int()).optional(),
  prompt_truncated: z.boolean().default(false),
});
export type GenerationTrace = z.infer<typeof GenerationTrace>;

export const ChatCompletionChoice = z.object({
  index: z.number().int(),
  message: AssistantMessage,
  finish_reason: z.enum(["stop", "length", "tool_calls"]),
  logprobs: z
    .object({
      content: z.array(
        z.object({
          token: z.string(),
          logprob: z.number(),
          bytes: z.array(z.number()).nullable(),
          top_logprobs: z.array(z.unknown()).optional(),
        }),
      ),
    })
    .nullable()
    .default(null),
  agentrl: GenerationTrace.optional(),
  /** vLLM dialect (`return_token_ids: true`): the generated ids. */
  token_ids: z.array(z.number().int()).nullable().optional(),
});
export type ChatCompletionChoice = z.infer<typeof ChatCompletionChoice>;

export const ChatCompletionResponse = z.object({
  id: z.string(),
  object: z.literal("chat.completion"),
  created: z.number().int(),
  model: z.string(),
  choices: z.array(ChatCompletionChoice),
  /** vLLM dialect (`return_token_ids: true`): the prompt ids the engine fed the model. */
  prompt_token_ids: z.array(z.number().int()).nullable().optional(),
  usage: z.object({
    prompt_tokens: z.number().int(),
    completion_tokens: z.number().int(),
    total_tokens: z.number().int(),
  }),
});
export type ChatCompletionResponse = z.infer<typeof ChatCompletionResponse>;

/**
 * SGLang's `POST /update_weights_from_disk`: load new weights from a Hugging Face folder the
 * engine can read, labelled `weight_version` (a version number here). The engine answers
 * `success` only once the new weights serve.
 */
export const UpdateWeightsFromDiskRequest = z.object({
  model_path: z.string().min(1),
  weight_version: z.union([z.number().int().nonnegative(), z.string().regex(/^\d+$/).transform(Number)]).optional(),
  load_format: z.string().optional(),
  abort_all_requests: z.boolean().optional(),
});
export type UpdateWeightsFromDiskRequest = z.infer<typeof UpdateWeightsFromDiskRequest>;

export const UpdateWeightsFromDiskResponse = z.object({
  success: z.boolean(),
  message: z.string(),
});
export type UpdateWeightsFromDiskResponse = z.infer<typeof UpdateWeightsFromDiskResponse>;
