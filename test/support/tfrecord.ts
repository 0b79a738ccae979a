import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "vitest";
import { maskedCrc32c } from "../../shared/tracking/crc32c.ts";
import { SYNC_TIMEOUT_MS } from "./cli.ts";

/** The frames of a TFRecord file, each length and record CRC checked (masked CRC-32C). */
export function tfRecordFrames(bytes: Uint8Array): Uint8Array[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; ) {
    const length = Number(view.getBigUint64(at, true));
    expect(view.getUint32(at + 8, true)).toBe(maskedCrc32c(bytes.subarray(at, at + 8)));
    const record = bytes.subarray(at + 12, at + 12 + length);
    expect(view.getUint32(at + 12 + length, true)).toBe(maskedCrc32c(record));
    out.push(record);
    at += 12 + length + 4;
  }
  return out;
}

/** One record as Debian's `protoc --decode_raw` prints it: an independent protobuf decoder. */
export const decodeRaw = (record: Uint8Array): string =>
  execFileSync("protoc", ["--decode_raw"], { input: record, timeout: SYNC_TIMEOUT_MS }).toString();

const FIXTURES = fileURLToPath(new URL("../fixtures", import.meta.url));

/**
 * One record decoded by protoc as an `Event` (test/fixtures/tensorboard_event.proto, TensorFlow's
 * field numbers): unlike --decode_raw, a tag is always printed as a string (`tag: "staleness/0"`;
 * decode_raw shows bytes that happen to parse as a message as one).
 */
export const decodeEvent = (record: Uint8Array): string =>
  execFileSync("protoc", [`--proto_path=${FIXTURES}`, "--decode=agentrl.test.Event", "tensorboard_event.proto"], {
    input: record,
    timeout: SYNC_TIMEOUT_MS,
  }).toString();

/** Every record of every event file in a TensorBoard folder, decoded by protoc as an Event. */
export function decodeEventFolder(dir: string): string[] {
  return readdirSync(dir)
    .filter((name) => name.startsWith("events.out.tfevents."))
    .flatMap((name) => tfRecordFrames(readFileSync(join(dir, name))).map(decodeEvent));
}
