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

const TensorEntry = z
  .object({
    dtype: z.literal("F32"),
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
): Uint8Array {
  assertLittleEndian();
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of tensors) {
    const size = t.shape.reduce((a, b) => a * b, 1);
    if (size !== t.data.length)
      throw new SafetensorsError(`${name}: shape [${t.shape}] holds ${size} values but data has ${t.data.length}`);
    header[name] = { dtype: "F32", shape: [...t.shape], data_offsets: [offset, offset + t.data.byteLength] };
    offset += t.data.byteLength;
  }
  let json = JSON.stringify(header);
  const rawLength = Buffer.byteLength(json, "utf8");
  json += " ".repeat((8 - ((8 + rawLength) % 8)) % 8);
  const headerBytes = Buffer.from(json, "utf8");
  const out = new Uint8Array(8 + headerBytes.length + offset);
  new DataView(out.buffer).setBigUint64(0, BigInt(headerBytes.length), true);
  out.set(headerBytes, 8);
  let cursor = 8 + headerBytes.length;
  for (const t of tensors.values()) {
    out.set(new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength), cursor);
    cursor += t.data.byteLength;
  }
  return out;
}

/** Decodes a float32 safetensors file; every structural problem is a SafetensorsError naming it. */
export function decodeSafetensors(bytes: Uint8Array): {
  tensors: Map<string, NamedTensor>;
  metadata: Record<string, string>;
} {
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
    const [begin, end] = entry.data.data_offsets;
    const size = entry.data.shape.reduce((a, b) => a * b, 1);
    if (end < begin || end > dataLength || end - begin !== size * 4)
      throw new SafetensorsError(
        `${name}: data_offsets [${begin}, ${end}] do not fit shape [${entry.data.shape}] in ${dataLength} data bytes`,
      );
    // Copy: the source offset need not be 4-byte aligned.
    const data = new Float32Array(size);
    new Uint8Array(data.buffer).set(bytes.subarray(dataStart + begin, dataStart + end));
    tensors.set(name, { shape: entry.data.shape, data });
  }
  return { tensors, metadata };
}
