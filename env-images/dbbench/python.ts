/**
 * The few pieces of Python semantics DBBench's scoring and observations rest on: upstream prints
 * query results with `str()` of the MySQL connector's Python values, builds its tables from
 * `str(cell)` of JSON numbers, and parses answers with `float()` and `eval()`. Reproduced here
 * so an agent sees, and is scored on, exactly what it would be upstream.
 */

/** A Python value as far as DBBench handles them: literals and the containers `eval` can build. */
export type PyValue =
  | string
  | null
  | boolean
  | { readonly kind: "int"; readonly text: string }
  | { readonly kind: "float"; readonly value: number }
  | { readonly kind: "list" | "tuple"; readonly items: readonly PyValue[] };

export const pyInt = (text: string): PyValue => ({ kind: "int", text });
export const pyFloat = (value: number): PyValue => ({ kind: "float", value });
export const pyList = (items: readonly PyValue[]): PyValue => ({ kind: "list", items });
export const pyTuple = (items: readonly PyValue[]): PyValue => ({ kind: "tuple", items });

/** `repr(float)`: the shortest round-trip digits, fixed notation for exponents -4..15, else `1e+16`. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mantissa, exp] = x.toExponential().split("e") as [string, string];
  const exponent = Number(exp);
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const sign = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    const body = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    const e = Math.abs(exponent).toString().padStart(2, "0");
    return `${sign}${body}e${exponent < 0 ? "-" : "+"}${e}`;
  }
  if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
  const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
  const fraction = digits.slice(exponent + 1);
  return `${sign}${whole}.${fraction || "0"}`;
}

/** Characters `str.isprintable()` rejects: categories C* and Z* except the ASCII space. */
const NON_PRINTABLE = /[\p{C}\p{Z}]/u;

/** `repr(str)`: single quotes unless the text has a `'` and no `"`, escapes as CPython writes them. */
export function pyStrRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const char of text) {
    const code = char.codePointAt(0)!;
    if (char === quote || char === "\\") out += `\\${char}`;
    else if (char === "\t") out += "\\t";
    else if (char === "\n") out += "\\n";
    else if (char === "\r") out += "\\r";
    else if (code < 0x20 || code === 0x7f) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else if (code < 0x7f || char === " " || !NON_PRINTABLE.test(char)) out += char;
    else if (code <= 0xff) out += `\\x${code.toString(16).padStart(2, "0")}`;
    else if (code <= 0xffff) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += `\\U${code.toString(16).padStart(8, "0")}`;
  }
  return out + quote;
}

/** `repr(value)`. */
export function pyRepr(value: PyValue): string {
  if (value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "string") return pyStrRepr(value);
  switch (value.kind) {
    case "int":
      return value.text;
    case "float":
      return pyFloatRepr(value.value);
    case "list":
      return `[${value.items.map(pyRepr).join(", ")}]`;
    case "tuple":
      return value.items.length === 1 ? `(${pyRepr(value.items[0]!)},)` : `(${value.items.map(pyRepr).join(", ")})`;
  }
}

/** `str(value)`: a string is itself, everything else its repr. */
export function pyStr(value: PyValue): string {
  return typeof value === "string" ? value : pyRepr(value);
}

/** Whitespace `str.strip()` removes (the ASCII and Unicode spaces Python counts). */
const PY_SPACE = "\\s\\u001c-\\u001f\\u0085";
const LEADING_SPACE = new RegExp(`^[${PY_SPACE}]+`, "u");
const TRAILING_SPACE = new RegExp(`[${PY_SPACE}]+$`, "u");

/** `text.strip()` with no argument, or `text.strip(chars)`. */
export function pyStrip(text: string, chars?: string): string {
  if (chars === undefined) return text.replace(LEADING_SPACE, "").replace(TRAILING_SPACE, "");
  let start = 0;
  let end = text.length;
  while (start < end && chars.includes(text[start]!)) start++;
  while (end > start && chars.includes(text[end - 1]!)) end--;
  return text.slice(start, end);
}

const FLOAT_NUMBER = /^[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?$/;
const FLOAT_SPECIAL = /^([+-]?)(inf|infinity|nan)$/i;

/** `float(text)`, or undefined where Python raises ValueError. */
export function pyParseFloat(text: string): number | undefined {
  const body = pyStrip(text);
  if (FLOAT_NUMBER.test(body)) return Number(body.replaceAll("_", ""));
  const special = FLOAT_SPECIAL.exec(body);
  if (!special) return undefined;
  if (special[2]!.toLowerCase() === "nan") return Number.NaN;
  return special[1] === "-" ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
}

/** The text of a JSON number as Python's `json` module reads it: an int unless it has `.`, `e` or `E`. */
export function pyNumberFromJson(literal: string): PyValue {
  return /[.eE]/.test(literal) ? pyFloat(Number(literal)) : pyInt(literal);
}

class LiteralParser {
  private at = 0;

  constructor(private readonly text: string) {}

  parse(): PyValue {
    const value = this.value();
    this.space();
    if (this.at !== this.text.length) throw new SyntaxError("trailing text");
    return value;
  }

  private space(): void {
    while (this.at < this.text.length && /\s/.test(this.text[this.at]!)) this.at++;
  }

  private value(): PyValue {
    this.space();
    const char = this.text[this.at];
    if (char === "[") return pyList(this.sequence("]"));
    if (char === "(") {
      const start = this.at;
      const items = this.sequence(")");
      // `(x)` is x itself; only `(x,)` and `()`/`(x, y)` are tuples.
      const inner = this.text.slice(start + 1, this.at - 1).trim();
      if (items.length === 1 && !inner.endsWith(",")) return items[0]!;
      return pyTuple(items);
    }
    if (char === "'" || char === '"') return this.string();
    for (const [word, value] of [
      ["None", null],
      ["True", true],
      ["False", false],
    ] as const) {
      if (this.text.startsWith(word, this.at) && !/\w/.test(this.text[this.at + word.length] ?? "")) {
        this.at += word.length;
        return value;
      }
    }
    const number = /^[+-]?(?:\d(?:_?\d)*(?:\.(?:\d(?:_?\d)*)?)?|\.\d(?:_?\d)*)(?:[eE][+-]?\d(?:_?\d)*)?/.exec(
      this.text.slice(this.at),
    );
    if (number && number[0] !== "" && !/\w/.test(this.text[this.at + number[0].length] ?? "")) {
      this.at += number[0].length;
      const literal = number[0].replaceAll("_", "");
      if (/[.eE]/.test(literal)) return pyFloat(Number(literal));
      return pyInt(String(BigInt(literal)));
    }
    throw new SyntaxError(`not a literal at ${this.at}`);
  }

  private sequence(close: "]" | ")"): PyValue[] {
    this.at++;
    const items: PyValue[] = [];
    for (;;) {
      this.space();
      if (this.text[this.at] === close) {
        this.at++;
        return items;
      }
      items.push(this.value());
      this.space();
      if (this.text[this.at] === ",") this.at++;
      else if (this.text[this.at] !== close) throw new SyntaxError(`expected , or ${close}`);
    }
  }

  private string(): string {
    const quote = this.text[this.at]!;
    this.at++;
    let out = "";
    while (this.at < this.text.length) {
      const char = this.text[this.at++]!;
      if (char === quote) return out;
      if (char === "\n") break;
      if (char !== "\\") {
        out += char;
        continue;
      }
      const next = this.text[this.at++];
      const simple: Record<string, string> = {
        n: "\n",
        t: "\t",
        r: "\r",
        "\\": "\\",
        "'": "'",
        '"': '"',
        "0": "\0",
        "\n": "",
      };
      if (next !== undefined && next in simple) out += simple[next];
      else if (next === "x" || next === "u" || next === "U") {
        const width = next === "x" ? 2 : next === "u" ? 4 : 8;
        const hex = this.text.slice(this.at, this.at + width);
        if (!/^[0-9a-fA-F]+$/.test(hex) || hex.length !== width) throw new SyntaxError("bad escape");
        out += String.fromCodePoint(Number.parseInt(hex, 16));
        this.at += width;
      } else out += `\\${next ?? ""}`;
    }
    throw new SyntaxError("unterminated string");
  }
}

/**
 * `eval(text)` for Python literals (strings, numbers, None/True/False, lists, tuples); undefined
 * where eval would raise. Expressions eval would compute (`[1+1]`) are not reproduced: they read
 * as failures, which sends upstream's scorer to its manual fallback in both implementations
 * alike only for such rare answers.
 */
export function pyEvalLiteral(text: string): PyValue | undefined {
  try {
    return new LiteralParser(text).parse();
  } catch {
    return undefined;
  }
}
