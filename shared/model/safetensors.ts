import { endianness } from "node:os";
import { z } from "zod";
import { AgentRlError, parseJsonOrThrow } from "../errors.ts";

/** Raised for bytes that are not a well-formed float32 safetensors file. */
export class SafetensorsError extends AgentRlError {
  override readonly name = "SafetensorsError";
}

/** One named float32 tensor. */
export interface NamedTensor {
  readonly shape: readonly number[];
  readonly data: Float32Array;
}

/** Element types read and written: float32, and the half types Hugging Face checkpoints ship in. */
export const FloatDtype = z.enum(["F32", "F16", "BF16"]);
export type FloatDtype = z.infer<typeof FloatDtype>;

const BYTES_PER_ELEMENT: Record<FloatDtype, number> = { F32: 4, F16: 2, BF16: 2 };

const TensorEntry = z
  .object({
    dtype: FloatDtype,
    shape: z.array(z.number().int().min(0)),
    data_offsets: z.tuple([z.number().int().min(0), z.number().int().min(0)]),
  })
  .strict();

const Header = z.record(z.string(), z.unknown());

function assertLittleEndian(): void {
  // Float32Array views use host byte order; safetensors is little-endian.
  if (endianness() !== "LE") throw new SafetensorsError("big-endian hosts are not supported");
}

/**
 * Encodes tensors as safetensors: u64 little-endian header length, a JSON header
 * `{name: {dtype, shape, data_offsets}, __metadata__}` padded with spaces to 8 bytes, then raw
 * little-endian data in header order.
 * @example encodeSafetensors(new Map([["w", { shape: [2], data: Float32Array.of(1, 2) }]]))
 */
export function encodeSafetensors(
  tensors: ReadonlyMap<string, NamedTensor>,
  metadata: Record<string, string> = {},
  dtype: FloatDtype = "F32",
): Uint8Array {
  assertLittleEndian();
  const header: Record<string, unknown> = { __metadata__: metadata };
  const encoded: Uint8Array[] = [];
  let offset = 0;
  for (const [name, t] of tensors) {
    const size = t.shape.reduce((a, b) => a * b, 1);
    if (size !== t.data.length)
      throw new SafetensorsError(`${name}: shape [${t.shape}] holds ${size} values but data has ${t.data.length}`);
    const bytes = fromFloat32(t.data, dtype);
    header[name] = { dtype, shape: [...t.shape], data_offsets: [offset, offset + bytes.byteLength] };
    encoded.push(bytes);
    offset += bytes.byteLength;
  }
  let json = JSON.stringify(header);
  const rawLength = Buffer.byteLength(json, "utf8");
  json += " ".repeat((8 - ((8 + rawLength) % 8)) % 8);
  const headerBytes = Buffer.from(json, "utf8");
  const out = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let cursor = 8 + headerBytes.length;
  for (const bytes of encoded) {
    out.set(bytes, cursor);
    cursor += bytes.byteLength;
  }
  return out;
}

/** Options for decodeSafetensors. */
export interface DecodeSafetensorsOptions {
  /** Element types accepted (all are widened to float32, exactly). @default ["F32"] */
  readonly dtypes?: readonly FloatDtype[];
}

/**
 * Decodes a safetensors file into float32 tensors; every structural problem is a SafetensorsError
 * naming it. `dtypes` lists the element types accepted (checkpoints of this project are F32 only).
 */
export function decodeSafetensors(
  bytes: Uint8Array,
  options: DecodeSafetensorsOptions = {},
): {
  tensors: Map<string, NamedTensor>;
  metadata: Record<string, string>;
  /** Element type each tensor was stored in. */
  dtypes: Map<string, FloatDtype>;
} {
  const accepted = options.dtypes ?? ["F32"];
  assertLittleEndian();
  if (bytes.length < 8)
    throw new SafetensorsError(`file is ${bytes.length} bytes, shorter than its 8-byte header length`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = Number(view.getBigUint64(0, true));
  if (8 + headerLength > bytes.length)
    throw new SafetensorsError(`header length ${headerLength} runs past the end of the ${bytes.length}-byte file`);
  const text = Buffer.from(bytes.buffer, bytes.byteOffset + 8, headerLength).toString("utf8");
  const header = parseJsonOrThrow(Header, text, "safetensors header");
  const dataStart = 8 + headerLength;
  const dataLength = bytes.length - dataStart;
  const tensors = new Map<string, NamedTensor>();
  const dtypes = new Map<string, FloatDtype>();
  let metadata: Record<string, string> = {};
  for (const [name, raw] of Object.entries(header)) {
    if (name === "__metadata__") {
      metadata = parseJsonOrThrow(z.record(z.string(), z.string()), JSON.stringify(raw), "safetensors __metadata__");
      continue;
    }
    const entry = TensorEntry.safeParse(raw);
    if (!entry.success)
      throw new SafetensorsError(
        `${name}: ${entry.error.issues.map((i) => `${i.path.join(".")} ${i.message}`).join("; ")}`,
      );
    const { dtype } = entry.data;
    if (!accepted.includes(dtype))
      throw new SafetensorsError(`${name}: dtype ${dtype} is not allowed here (allowed: ${accepted.join(", ")})`);
    const [begin, end] = entry.data.data_offsets;
    const size = entry.data.shape.reduce((a, b) => a * b, 1);
    if (end < begin || end > dataLength || end - begin !== size * BYTES_PER_ELEMENT[dtype])
      throw new SafetensorsError(
        `${name}: data_offsets [${begin}, ${end}] do not fit shape [${entry.data.shape}] in ${dataLength} data bytes`,
      );
    tensors.set(name, {
      shape: entry.data.shape,
      data: toFloat32(bytes.subarray(dataStart + begin, dataStart + end), dtype),
    });
    dtypes.set(name, dtype);
  }
  return { tensors, metadata, dtypes };
}

/** Widens little-endian F32/F16/BF16 bytes to float32 (exact: every half value is a float32 value). */
function toFloat32(raw: Uint8Array, dtype: FloatDtype): Float32Array {
  // Copy first: the source offset need not be aligned.
  const aligned = Uint8Array.from(raw);
  if (dtype === "F32") return new Float32Array(aligned.buffer);
  const halves = new Uint16Array(aligned.buffer);
  const out = new Float32Array(halves.length);
  if (dtype === "BF16") {
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < halves.length; i++) bits[i] = halves[i]! << 16;
    return out;
  }
  for (let i = 0; i < halves.length; i++) out[i] = halfToFloat(halves[i]!);
  return out;
}

/** Narrows float32 to little-endian bytes of `dtype`, rounding to nearest even. */
function fromFloat32(data: Float32Array, dtype: FloatDtype): Uint8Array {
  if (dtype === "F32") return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const out = new Uint16Array(data.length);
  if (dtype === "BF16") {
    const bits = new Uint32Array(Float32Array.from(data).buffer);
    for (let i = 0; i < bits.length; i++) {
      const b = bits[i]!;
      // NaN stays a (quiet) NaN; otherwise round the dropped 16 bits to nearest, ties to even.
      if ((b & 0x7fffffff) > 0x7f800000) out[i] = (b >>> 16) | 0x40;
      else out[i] = (b + 0x7fff + ((b >>> 16) & 1)) >>> 16;
    }
  } else for (let i = 0; i < data.length; i++) out[i] = floatToHalf(data[i]!);
  return new Uint8Array(out.buffer);
}

function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >>> 10) & 0x1f;
  const mantissa = h & 0x3ff;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 0x1f) return mantissa ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + mantissa / 1024) * 2 ** (exponent - 15);
}

/** IEEE binary16 bits of `value`, rounded to nearest even (overflow to ±Inf, underflow through subnormals). */
function floatToHalf(value: number): number {
  if (Number.isNaN(value)) return 0x7e00;
  const sign = value < 0 || Object.is(value, -0) ? 0x8000 : 0;
  const abs = Math.abs(value);
  if (abs >= 65520) return sign | 0x7c00;
  if (abs < 2 ** -14) return sign | roundHalfEven(abs / 2 ** -24);
  const exponent = Math.floor(Math.log2(abs));
  // log2 can be off by one at powers of two; correct so that 1 <= abs / 2^e < 2.
  const e = abs / 2 ** exponent >= 2 ? exponent + 1 : abs / 2 ** exponent < 1 ? exponent - 1 : exponent;
  const mantissa = roundHalfEven((abs / 2 ** e - 1) * 1024);
  // A mantissa that rounds up to 1024 carries into the exponent, which the addition does.
  return sign | (((e + 15) << 10) + mantissa);
}

function roundHalfEven(x: number): number {
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}
