import { Tokenizer } from "@huggingface/tokenizers";
import { describe, expect, it } from "vitest";
import {
  BpeTokenizer,
  MIN_VOCAB_SIZE,
  SPECIAL_TOKENS,
  TokenizerError,
  trainTokenizer,
} from "../../shared/chat/index.ts";
import { ValidationError } from "../../shared/errors.ts";

const corpus = [
  "The quick brown fox jumps over the lazy dog. The dog sleeps.",
  'SELECT name, count(*) FROM users WHERE age > 30 GROUP BY name; {"name": "execute_sql"}',
  "ls -la /home/user && cat notes.txt | wc -l",
  "héllo wörld — naïve café; 日本語のテキスト; emoji 🎉👩‍👩‍👧",
  "<|im_start|>user\nhello<|im_end|>\n<tool_call>{}</tool_call>",
].flatMap((text) => Array.from({ length: 20 }, (_, i) => `${text} ${i}`));

describe("byte-level BPE tokenizer", () => {
  const json = trainTokenizer(corpus, 512);
  const tokenizer = BpeTokenizer.fromJson(json);

  it("learns merges up to the vocabulary size and puts special tokens after the bytes", () => {
    expect(json.model.merges.length).toBeGreaterThan(50);
    expect(tokenizer.size).toBeLessThanOrEqual(512);
    expect(json.added_tokens.map((t) => [t.id, t.content])).toEqual(SPECIAL_TOKENS.map((s, i) => [256 + i, s]));
    // Frequent words become single tokens.
    expect(tokenizer.encode("The")).toHaveLength(1);
  });

  it.each([
    ["ascii", "The quick brown fox, 42 times!"],
    ["unseen words", "zyzzyva qwertyuiop xylophone"],
    ["whitespace", "  two  spaces\tand\ttabs\n\n\r\nwindows line\r\n  "],
    ["latin accents", "héllo wörld — naïve café"],
    ["cjk", "日本語のテキストと中文"],
    ["emoji and zwj", "🎉 👩‍👩‍👧 🏳️‍🌈"],
    ["control bytes", "nul\u0000bell\u0007 del\u007f"],
    ["special tokens inside text", '<|im_start|>assistant\n<tool_call>{"a": 1}</tool_call><|im_end|>'],
    ["lone special-like text", "<|im_sta rt|> <tool_cal>"],
  ])("round-trips %s exactly", (_name, text) => {
    const ids = tokenizer.encode(text);
    expect(ids.every((id) => id >= 0 && id < tokenizer.size)).toBe(true);
    expect(tokenizer.decode(ids)).toBe(text);
  });

  it("encodes special tokens as single ids", () => {
    const ids = tokenizer.encode("a<|im_end|>b");
    expect(ids).toContain(tokenizer.special("<|im_end|>"));
    expect(tokenizer.encode("<tool_call>")).toEqual([tokenizer.special("<tool_call>")]);
  });

  it("saves and loads through tokenizer.json text, and the file loads in @huggingface/tokenizers directly", () => {
    const reloaded = BpeTokenizer.fromText(tokenizer.toText());
    const text = "SELECT name FROM users; 日本 🎉";
    expect(reloaded.encode(text)).toEqual(tokenizer.encode(text));
    const hf = new Tokenizer(JSON.parse(tokenizer.toText()), {});
    expect(hf.encode(text, { add_special_tokens: false }).ids).toEqual(tokenizer.encode(text));
  });

  it("is deterministic", () => {
    expect(JSON.stringify(trainTokenizer(corpus, 512))).toBe(JSON.stringify(json));
  });

  it("gives byte tokens their bytes", () => {
    const euro = tokenizer.encode("€"); // 3 UTF-8 bytes, unseen in training -> byte tokens
    expect(euro.flatMap((id) => tokenizer.tokenBytes(id))).toEqual([0xe2, 0x82, 0xac]);
  });

  it("rejects a vocabulary too small and a malformed file with the failing field", () => {
    expect(() => trainTokenizer(corpus, MIN_VOCAB_SIZE - 1)).toThrow(TokenizerError);
    const broken = JSON.parse(tokenizer.toText()) as { model: { type: string } };
    broken.model.type = "WordPiece";
    expect(() => BpeTokenizer.fromJson(broken)).toThrow(ValidationError);
    expect(() => BpeTokenizer.fromJson(broken)).toThrow(/model\.type/);
    expect(() => BpeTokenizer.fromText("{not json")).toThrow(TokenizerError);
  });
});
