import { Template } from "@huggingface/jinja";
import { z } from "zod";
import { AgentRlError } from "../errors.ts";
import type { AssistantMessage, ChatMessage, ToolSpec } from "../protocol/openai.ts";
import { parseAssistant } from "./parse.ts";
import { renderChat, TURN_SUFFIX } from "./template.ts";
import {
  BpeTokenizer,
  END_OF_TEXT,
  END_OF_TURN,
  type ModelTokenizerJson,
  type TokenizerJson,
  trainTokenizer,
} from "./tokenizer.ts";

/**
 * While a template renders, control-token text inside user, system and tool content (and this
 * marker itself) stands in as `\uE000<n>\uE001`, n indexing the codec's escaped texts; encoding
 * turns each stand-in back into its text as plain byte tokens. So control ids come only from the
 * template's own markup, never from what a user or an environment wrote.
 */
const ESCAPE_OPEN = "\uE000";
const ESCAPED = /\uE000(\d+)\uE001/;

export class ChatTemplateError extends AgentRlError {
  override readonly name = "ChatTemplateError";
}

/** Tokens of a whole conversation with the loss mask (1 on tokens the assistant produced). */
export interface EncodedConversation {
  readonly tokens: number[];
  readonly lossMask: number[];
}

/** What a generation decodes to. */
export interface ParsedGeneration {
  /** Decoded text without the stop token. */
  readonly text: string;
  readonly message: AssistantMessage;
  /** True when the ids end with a stop token (the turn is closed). */
  readonly stopped: boolean;
}

/**
 * The chat format in one object: tokenizer + template + tool-call parser, and the agent-loop
 * helpers (reference section 3) that keep a trajectory's tokens exactly what the model saw and
 * produced:
 *
 * ```ts
 * let tokens = codec.promptTokens(start.messages, start.tools);            // mask 0
 * const gen = await policy(tokens);                                         // ids as produced, mask 1
 * const { message } = codec.parseGenerated(gen);                            // -> env
 * const obs = codec.continuationTokens([...msgs, message], envMessages, tools, gen); // mask 0
 * tokens = [...tokens, ...gen, ...obs];
 * ```
 */
export class ChatCodec {
  /** `<|im_end|>`: ends an assistant turn; generation stops on it. */
  readonly endOfTurnId: number;
  /** `<|endoftext|>`: also stops generation. */
  readonly endOfTextId: number;

  /** A model's own chat template (tokenizer_config.json), or undefined for this project's CHAT_TEMPLATE. */
  private readonly template: Template | undefined;
  /** Texts escaped in content: the tokenizer's control texts (longest first) and ESCAPE_OPEN. */
  private readonly escapedTexts: readonly string[];
  private readonly escapePattern: RegExp;

  constructor(
    readonly tokenizer: BpeTokenizer,
    options: { chatTemplate?: string } = {},
  ) {
    this.endOfTurnId = tokenizer.special(END_OF_TURN);
    this.endOfTextId = tokenizer.special(END_OF_TEXT);
    this.escapedTexts = [...[...tokenizer.controlTexts].sort((a, b) => b.length - a.length), ESCAPE_OPEN];
    this.escapePattern = new RegExp(this.escapedTexts.map(escapeRegExp).join("|"), "g");
    try {
      this.template = options.chatTemplate === undefined ? undefined : new Template(options.chatTemplate);
    } catch (error) {
      throw new ChatTemplateError(`chat_template does not parse: ${(error as Error).message}`);
    }
  }

  /** Loads a codec from a tokenizer.json object (validated). */
  static fromTokenizerJson(json: unknown): ChatCodec {
    return new ChatCodec(BpeTokenizer.fromJson(json));
  }

  /**
   * A model's own format: its tokenizer.json and the `chat_template` of its tokenizer_config.json
   * (ChatML-style: turns end with `<|im_end|>`, tool calls in `<tool_call>` JSON, as Qwen2.5/Qwen3).
   * @example ChatCodec.fromModelFiles(JSON.parse(tokenizerText), JSON.parse(tokenizerConfigText))
   */
  static fromModelFiles(tokenizerJson: unknown, tokenizerConfig: unknown): ChatCodec {
    const config = z
      .object({ chat_template: z.string().min(1) })
      .passthrough()
      .safeParse(tokenizerConfig);
    if (!config.success) throw new ChatTemplateError("tokenizer_config.json: chat_template is missing or not a string");
    return new ChatCodec(BpeTokenizer.fromJson(tokenizerJson), { chatTemplate: config.data.chat_template });
  }

  /**
   * Trains the tokenizer on full renders of `conversations` (so the template's own text, tool
   * schemas and markup get merges) and returns the codec.
   */
  static train(
    conversations: ReadonlyArray<{ messages: readonly ChatMessage[]; tools?: readonly ToolSpec[] }>,
    vocabSize: number,
  ): ChatCodec {
    const corpus = conversations.map((c) => renderChat(c.messages, c.tools, { addGenerationPrompt: false }));
    return new ChatCodec(BpeTokenizer.fromJson(trainTokenizer(corpus, vocabSize)));
  }

  /** Ids that end a generation. */
  get stopTokenIds(): readonly number[] {
    return [this.endOfTurnId, this.endOfTextId];
  }

  /** The tokenizer.json object to store in a checkpoint. */
  tokenizerJson(): TokenizerJson | ModelTokenizerJson {
    return this.tokenizer.json;
  }

  encode(text: string): number[] {
    return this.tokenizer.encode(text);
  }

  decode(ids: readonly number[]): string {
    return this.tokenizer.decode(ids);
  }

  render(messages: readonly ChatMessage[], tools?: readonly ToolSpec[], addGenerationPrompt = false): string {
    return renderChat(messages, tools, { addGenerationPrompt }, this.template);
  }

  /** Prompt for the next assistant turn: messages + tools, ending with `<|im_start|>assistant\n`. */
  promptTokens(messages: readonly ChatMessage[], tools?: readonly ToolSpec[]): number[] {
    return this.encodeRendered(this.renderEscaped(messages, tools, true));
  }

  /** Like `render`, with control-token text in user, system and tool content escaped (see ESCAPE_OPEN). */
  private renderEscaped(
    messages: readonly ChatMessage[],
    tools: readonly ToolSpec[] | undefined,
    addGenerationPrompt: boolean,
  ): string {
    // The assistant's own turns stay as they are: its tokens are kept as generated, and model
    // templates read markup in them (Qwen3 splits `</think>`).
    const escaped = messages.map((message) => {
      if (message.role === "assistant") return message;
      const content = message.content.replace(this.escapePattern, (text) => this.standIn(text));
      return content === message.content ? message : { ...message, content };
    });
    return renderChat(escaped, tools, { addGenerationPrompt }, this.template);
  }

  private standIn(text: string): string {
    return `${ESCAPE_OPEN}${this.escapedTexts.indexOf(text)}\uE001`;
  }

  /** Encodes rendered text: template markup as control ids, escaped content as plain bytes. */
  private encodeRendered(text: string): number[] {
    if (!text.includes(ESCAPE_OPEN)) return this.encode(text);
    const parts = text.split(ESCAPED);
    const ids: number[] = [];
    parts.forEach((part, i) => {
      if (i % 2 === 0) ids.push(...this.encode(part));
      else ids.push(...this.tokenizer.encodePlain(this.escapedTexts[Number(part)] ?? ""));
    });
    return ids;
  }

  /**
   * The tokens a model should generate for `assistant` after `prevMessages` (its body and the
   * closing `<|im_end|>`): the supervised target of behaviour cloning.
   */
  assistantTokens(
    prevMessages: readonly ChatMessage[],
    assistant: AssistantMessage,
    tools?: readonly ToolSpec[],
  ): number[] {
    const before = this.renderEscaped(prevMessages, tools, true);
    const after = this.renderEscaped([...prevMessages, assistant], tools, false);
    const turn = suffixAfter(before, after, "assistant turn");
    if (!turn.endsWith(TURN_SUFFIX))
      throw new ChatTemplateError("an assistant turn must render ending in <|im_end|>\\n");
    return this.encodeRendered(turn.slice(0, -1)); // keep <|im_end|>, drop the newline after it
  }

  /**
   * Observation tokens after a generated turn: `prevMessages` ends with the assistant message
   * just generated, `newMessages` are what the environment answered. The text is the difference
   * between rendering before and after appending them (plus the generation prompt), preceded by
   * what closes the generated turn: `\n` when `generated` ended with a stop token, else
   * `<|im_end|>\n` (a turn cut by max_tokens). All of it is loss mask 0.
   */
  continuationTokens(
    prevMessages: readonly ChatMessage[],
    newMessages: readonly ChatMessage[],
    tools?: readonly ToolSpec[],
    generated?: readonly number[],
    options: { addGenerationPrompt?: boolean } = {},
  ): number[] {
    const last = prevMessages[prevMessages.length - 1];
    if (last?.role !== "assistant")
      throw new ChatTemplateError("continuationTokens: prevMessages must end with the generated assistant message");
    const observation = this.template
      ? this.observationText(newMessages, tools, options.addGenerationPrompt ?? true)
      : suffixAfter(
          this.renderEscaped(prevMessages, tools, false),
          this.renderEscaped([...prevMessages, ...newMessages], tools, options.addGenerationPrompt ?? true),
          "observation",
        );
    const lastId = generated?.[generated.length - 1];
    const closed = generated === undefined || (lastId !== undefined && this.stopTokenIds.includes(lastId));
    return this.encodeRendered((closed ? "\n" : TURN_SUFFIX) + observation);
  }

  /**
   * A full conversation as the agent loop would have produced it (canonical assistant tokens),
   * with loss mask 1 exactly on assistant tokens (body and `<|im_end|>`); it ends after the last
   * assistant turn. Used by the warm-up (behaviour cloning) and tests.
   */
  encodeConversation(messages: readonly ChatMessage[], tools?: readonly ToolSpec[]): EncodedConversation {
    const tokens: number[] = [];
    const lossMask: number[] = [];
    const push = (ids: readonly number[], mask: 0 | 1) => {
      for (const id of ids) {
        tokens.push(id);
        lossMask.push(mask);
      }
    };
    const firstAssistant = messages.findIndex((m) => m.role === "assistant");
    if (firstAssistant < 0) return { tokens, lossMask };
    push(this.promptTokens(messages.slice(0, firstAssistant), tools), 0);
    let i = firstAssistant;
    while (i < messages.length) {
      const assistant = messages[i] as AssistantMessage;
      const generated = this.assistantTokens(messages.slice(0, i), assistant, tools);
      push(generated, 1);
      let next = i + 1;
      while (next < messages.length && messages[next]?.role !== "assistant") next++;
      if (next >= messages.length) break;
      push(this.continuationTokens(messages.slice(0, i + 1), messages.slice(i + 1, next), tools, generated), 0);
      i = next;
    }
    return { tokens, lossMask };
  }

  /**
   * The text a model template renders for `newMessages` after an assistant turn, found behind a
   * stand-in assistant turn: templates such as Qwen3's render the last assistant turn differently
   * from earlier ones, so diffing renders of the real conversation would change earlier text.
   */
  private observationText(
    newMessages: readonly ChatMessage[],
    tools: readonly ToolSpec[] | undefined,
    addGenerationPrompt: boolean,
  ): string {
    const marker = "agentrl-stand-in-turn";
    const full = this.renderEscaped(
      [{ role: "user", content: "agentrl-stand-in-query" }, { role: "assistant", content: marker }, ...newMessages],
      tools,
      addGenerationPrompt,
    );
    const end = full.indexOf(TURN_SUFFIX, full.indexOf(marker));
    if (full.indexOf(marker) < 0 || end < 0)
      throw new ChatTemplateError("the chat template does not end assistant turns with <|im_end|>\\n (ChatML)");
    return full.slice(end + TURN_SUFFIX.length);
  }

  /** Parses generated text into an assistant message (see `parseAssistant`). */
  parseAssistant(text: string, idPrefix?: string): AssistantMessage {
    return parseAssistant(text, idPrefix);
  }

  /** Decodes generated ids (dropping a final stop token) and parses them. */
  parseGenerated(ids: readonly number[], idPrefix?: string): ParsedGeneration {
    const lastId = ids[ids.length - 1];
    const stopped = lastId !== undefined && this.stopTokenIds.includes(lastId);
    const text = this.decode(stopped ? ids.slice(0, -1) : ids);
    return { text, message: parseAssistant(text, idPrefix), stopped };
  }
}

function suffixAfter(before: string, after: string, what: string): string {
  if (!after.startsWith(before))
    throw new ChatTemplateError(`the chat template does not render incrementally (${what}): earlier text changed`);
  return after.slice(before.length);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
