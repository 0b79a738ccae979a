/**
 * The chat format shared by the policy server, the rollout worker, the trainer and the warm-up:
 * a byte-level BPE tokenizer (Hugging Face tokenizer.json), a Qwen2.5/Hermes-style template with
 * tool calls, the tool-call parser and the agent-loop token helpers. Start from `ChatCodec`.
 */
export {
  ChatCodec,
  ChatTemplateError,
  type EncodedConversation,
  type ParsedGeneration,
} from "./codec.ts";
export { parseAssistant } from "./parse.ts";
export { ASSISTANT_PREFIX, CHAT_TEMPLATE, renderChat, TURN_SUFFIX } from "./template.ts";
export {
  BpeTokenizer,
  END_OF_TEXT,
  END_OF_TURN,
  MIN_VOCAB_SIZE,
  SPECIAL_TOKENS,
  type SpecialToken,
  TokenizerError,
  TokenizerJson,
  trainTokenizer,
} from "./tokenizer.ts";
