import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { z } from "zod";
import { AgentRlError, parseOrThrow } from "../errors.ts";

/**
 * Byte-level BPE in the Hugging Face `tokenizer.json` format: trained here in plain JS
 * (`trainTokenizer`), encoded and decoded by `@huggingface/tokenizers`, so the same file loads in
 * Python `tokenizers`/`transformers` as well. Byte-level means every string round-trips exactly.
 */

/** Special tokens of the chat format; ids 256.. in this order, right after the 256 byte tokens. */
export const SPECIAL_TOKENS = [
  "<|endoftext|>",
  "<|im_start|>",
  "<|im_end|>",
  "<tool_call>",
  "</tool_call>",
  "<tool_response>",
  "</tool_response>",
  "<tools>",
  "</tools>",
] as const;
export type SpecialToken = (typeof SPECIAL_TOKENS)[number];

/** Tokens that end a generation or a document: the model is never trained to emit them mid-turn. */
export const END_OF_TURN: SpecialToken = "<|im_end|>";
export const END_OF_TEXT: SpecialToken = "<|endoftext|>";

/** GPT-2's pre-tokenizer split (the one `ByteLevel` with `use_regex: true` applies). */
const PRE_TOKENIZE = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** GPT-2's reversible map from bytes to printable code points (space -> Ġ, newline -> Ċ, ...). */
function byteToUnicodeTable(): string[] {
  const printable: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) printable.push(b);
  for (let b = 0xa1; b <= 0xac; b++) printable.push(b);
  for (let b = 0xae; b <= 0xff; b++) printable.push(b);
  const table: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    if (printable.includes(b)) table[b] = String.fromCodePoint(b);
    else table[b] = String.fromCodePoint(256 + extra++);
  }
  return table;
}
const BYTE_TO_UNICODE = byteToUnicodeTable();
const UNICODE_TO_BYTE = new Map(BYTE_TO_UNICODE.map((ch, byte) => [ch, byte]));
const UTF8 = new TextEncoder();

/** The subset of tokenizer.json this project writes and reads (validated on load). */
export const TokenizerJson = z.object({
  version: z.string(),
  truncation: z.null().optional(),
  padding: z.null().optional(),
  added_tokens: z.array(
    z.object({
      id: z.number().int().nonnegative(),
      content: z.string().min(1),
      single_word: z.boolean(),
      lstrip: z.boolean(),
      rstrip: z.boolean(),
      normalized: z.boolean(),
      special: z.boolean(),
    }),
  ),
  normalizer: z.null(),
  pre_tokenizer: z.object({
    type: z.literal("ByteLevel"),
    add_prefix_space: z.boolean(),
    trim_offsets: z.boolean(),
    use_regex: z.boolean(),
  }),
  post_processor: z.null(),
  decoder: z.object({
    type: z.literal("ByteLevel"),
    add_prefix_space: z.boolean(),
    trim_offsets: z.boolean(),
    use_regex: z.boolean(),
  }),
  model: z.object({
    type: z.literal("BPE"),
    dropout: z.null(),
    unk_token: z.null(),
    continuing_subword_prefix: z.null(),
    end_of_word_suffix: z.null(),
    fuse_unk: z.boolean(),
    byte_fallback: z.boolean(),
    ignore_merges: z.boolean(),
    vocab: z.record(z.string(), z.number().int().nonnegative()),
    merges: z.array(z.tuple([z.string(), z.string()])),
  }),
});
export type TokenizerJson = z.infer<typeof TokenizerJson>;

/**
 * Any byte-level BPE tokenizer.json a Hugging Face model ships (Qwen2/2.5/3: NFC normalizer, a
 * Split + ByteLevel pre-tokenizer sequence): only the parts this class reads are checked, the rest
 * is @huggingface/tokenizers' business. Such a file needs only the two stop tokens as added tokens.
 */
export const ModelTokenizerJson = z
  .object({
    added_tokens: z.array(z.object({ id: z.number().int().nonnegative(), content: z.string().min(1) }).passthrough()),
    model: z
      .object({
        type: z.literal("BPE"),
        vocab: z.record(z.string(), z.number().int().nonnegative()),
        merges: z.array(z.union([z.string(), z.tuple([z.string(), z.string()])])),
      })
      .passthrough(),
  })
  .passthrough();
export type ModelTokenizerJson = z.infer<typeof ModelTokenizerJson>;

export class TokenizerError extends AgentRlError {
  override readonly name = "TokenizerError";
}

/** Smallest vocabulary: the 256 byte tokens plus the special tokens. */
export const MIN_VOCAB_SIZE = 256 + SPECIAL_TOKENS.length;

/**
 * Trains a byte-level BPE tokenizer on `corpus` with at most `vocabSize` ids (bytes, special
 * tokens, then merges in the order learned). Deterministic: the same corpus gives the same file.
 * Special-token strings inside the corpus are cut out before counting, so merges never span them.
 * @example const json = trainTokenizer(texts, 1024); const tok = BpeTokenizer.fromJson(json);
 */
export function trainTokenizer(corpus: readonly string[], vocabSize: number): TokenizerJson {
  if (!Number.isInteger(vocabSize) || vocabSize < MIN_VOCAB_SIZE)
    throw new TokenizerError(
      `vocabSize ${vocabSize} is too small: at least ${MIN_VOCAB_SIZE} (bytes + special tokens)`,
    );

  // Unique pre-tokenized words (as byte-level symbol ids) with their frequency.
  const wordCounts = new Map<string, number>();
  const specialSplit = new RegExp(SPECIAL_TOKENS.map(escapeRegExp).join("|"), "g");
  for (const text of corpus) {
    for (const piece of text.split(specialSplit)) {
      for (const match of piece.matchAll(PRE_TOKENIZE)) {
        const word = byteLevel(match[0]);
        wordCounts.set(word, (wordCounts.get(word) ?? 0) + 1);
      }
    }
  }

  const symbols: string[] = [...BYTE_TO_UNICODE];
  const symbolId = new Map<string, number>(symbols.map((s, i) => [s, i]));
  const words: number[][] = [];
  const freqs: number[] = [];
  for (const [word, count] of wordCounts) {
    words.push([...word].map((ch) => symbolId.get(ch) as number));
    freqs.push(count);
  }

  const merges: Array<[string, string]> = [];
  const maxMerges = vocabSize - MIN_VOCAB_SIZE;
  // Pair counts are recomputed each round: simple, and fast enough for the few-MB corpora the
  // warm-up uses (unique words are few; most text repeats).
  const PAIR = 1 << 20;
  while (merges.length < maxMerges) {
    const pairCounts = new Map<number, number>();
    for (let w = 0; w < words.length; w++) {
      const word = words[w] as number[];
      const freq = freqs[w] as number;
      for (let i = 0; i + 1 < word.length; i++) {
        const key = (word[i] as number) * PAIR + (word[i + 1] as number);
        pairCounts.set(key, (pairCounts.get(key) ?? 0) + freq);
      }
    }
    let bestKey = -1;
    let bestCount = 1; // a pair seen once is not worth a vocabulary entry
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && bestKey >= 0 && key < bestKey)) {
        bestKey = key;
        bestCount = count;
      }
    }
    if (bestKey < 0) break;
    const left = Math.floor(bestKey / PAIR);
    const right = bestKey % PAIR;
    const merged = (symbols[left] as string) + (symbols[right] as string);
    const mergedId = symbols.length;
    symbols.push(merged);
    merges.push([symbols[left] as string, symbols[right] as string]);
    for (const word of words) {
      for (let i = 0; i + 1 < word.length; i++) {
        if (word[i] === left && word[i + 1] === right) word.splice(i, 2, mergedId);
      }
    }
  }

  const vocab: Record<string, number> = {};
  BYTE_TO_UNICODE.forEach((s, i) => {
    vocab[s] = i;
  });
  SPECIAL_TOKENS.forEach((s, i) => {
    vocab[s] = 256 + i;
  });
  symbols.slice(256).forEach((s, i) => {
    vocab[s] = MIN_VOCAB_SIZE + i;
  });

  const byteLevelOptions = { add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: SPECIAL_TOKENS.map((content, i) => ({
      id: 256 + i,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", ...byteLevelOptions },
    post_processor: null,
    decoder: { type: "ByteLevel", ...byteLevelOptions },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges,
    },
  };
}

/**
 * A loaded tokenizer: `encode` splits out special tokens and BPE-encodes the rest;
 * `decode(encode(s)) === s` for every string.
 */
export class BpeTokenizer {
  private readonly hf: HfTokenizer;
  private readonly specialIds: ReadonlyMap<SpecialToken, number>;
  /** Number of ids in use (bytes + specials + merges); the model's vocabSize must be at least this. */
  readonly size: number;

  private constructor(
    readonly json: TokenizerJson | ModelTokenizerJson,
    required: readonly SpecialToken[] = SPECIAL_TOKENS,
  ) {
    this.hf = new HfTokenizer(json, { clean_up_tokenization_spaces: false });
    const ids = new Map<SpecialToken, number>();
    for (const token of SPECIAL_TOKENS) {
      const added = json.added_tokens.find((t) => t.content === token);
      if (added) ids.set(token, added.id);
      else if (required.includes(token)) throw new TokenizerError(`tokenizer.json lacks the special token ${token}`);
    }
    this.specialIds = ids;
    // A loop, not Math.max(...): a model vocabulary (150k ids) overflows the argument stack.
    let largest = -1;
    for (const id of Object.values(json.model.vocab)) if (id > largest) largest = id;
    for (const t of json.added_tokens) if (t.id > largest) largest = t.id;
    this.size = largest + 1;
  }

  /**
   * Validates and loads a tokenizer.json object (as parsed JSON): one this project trained, or a
   * model's own byte-level BPE file (ModelTokenizerJson) holding at least the two stop tokens.
   */
  static fromJson(json: unknown): BpeTokenizer {
    const own = TokenizerJson.safeParse(json);
    if (own.success) return new BpeTokenizer(own.data);
    const model = ModelTokenizerJson.safeParse(json);
    if (model.success) return new BpeTokenizer(model.data, [END_OF_TURN, END_OF_TEXT]);
    return new BpeTokenizer(parseOrThrow(TokenizerJson, json, "tokenizer.json"));
  }

  /** Loads tokenizer.json text. */
  static fromText(text: string): BpeTokenizer {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (error) {
      throw new TokenizerError(`tokenizer.json is not valid JSON: ${(error as Error).message}`);
    }
    return BpeTokenizer.fromJson(json);
  }

  /** The file's text (what a checkpoint stores as tokenizer.json). */
  toText(): string {
    return JSON.stringify(this.json);
  }

  encode(text: string): number[] {
    if (text === "") return [];
    return this.hf.encode(text, { add_special_tokens: false }).ids;
  }

  /** Texts that `encode` turns into one control id wherever they appear (the file's added tokens). */
  get controlTexts(): readonly string[] {
    return this.json.added_tokens.map((t) => t.content);
  }

  /**
   * `text` as byte tokens only, never an added (control) token: for content that merely looks
   * like one, e.g. a user typing `<|im_end|>`. Byte-level BPE vocabularies hold all 256 bytes.
   */
  encodePlain(text: string): number[] {
    return [...UTF8.encode(text)].map((byte) => {
      const id = this.json.model.vocab[BYTE_TO_UNICODE[byte] as string];
      if (id === undefined) throw new TokenizerError(`tokenizer.json has no token for byte ${byte}`);
      return id;
    });
  }

  decode(ids: readonly number[]): string {
    if (ids.length === 0) return "";
    return this.hf.decode([...ids], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  /** Id of a special token (a model's own tokenizer may lack the tool-markup ones). */
  special(token: SpecialToken): number {
    const id = this.specialIds.get(token);
    if (id === undefined) throw new TokenizerError(`tokenizer.json has no special token ${token}`);
    return id;
  }

  /** The token's string as stored in the vocabulary (byte-level form), for logprob displays. */
  tokenString(id: number): string {
    return this.hf.id_to_token(id) ?? "";
  }

  /** The UTF-8 bytes one token stands for (a special token: its own text). */
  tokenBytes(id: number): number[] {
    const added = this.json.added_tokens.find((t) => t.id === id);
    if (added) return [...UTF8.encode(added.content)];
    return [...this.tokenString(id)].map((ch) => UNICODE_TO_BYTE.get(ch) ?? 0);
  }
}

function byteLevel(text: string): string {
  let out = "";
  for (const byte of UTF8.encode(text)) out += BYTE_TO_UNICODE[byte];
  return out;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
