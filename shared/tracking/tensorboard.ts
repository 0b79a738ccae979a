import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import type { ObjectStore } from "../transport/types.ts";
import { maskedCrc32c } from "./crc32c.ts";
import { ProtoWriter } from "./protobuf.ts";
import type { RunStatus, TrackerRecord, TrackerSink } from "./tracker.ts";

/**
 * TensorBoard event files written natively: TFRecord frames (length, masked CRC-32C of the
 * length, the record, masked CRC-32C of the record) holding `Event` protobufs. TensorBoard reads
 * the folder as one run; nothing of TensorFlow is needed to write it.
 *
 * Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5.
 * Summary: value = 1 (repeated). Summary.Value: tag = 1, simple_value = 2 (float), histo = 5,
 * tensor = 8, metadata = 9. HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5,
 * bucket_limit 6, bucket 7 (packed doubles).
 */

/** One TFRecord frame around `record`. */
export function tfRecord(record: Uint8Array): Uint8Array {
  const length = new Uint8Array(8);
  new DataView(length.buffer).setBigUint64(0, BigInt(record.length), true);
  const frame = new Uint8Array(8 + 4 + record.length + 4);
  const view = new DataView(frame.buffer);
  frame.set(length, 0);
  view.setUint32(8, maskedCrc32c(length), true);
  frame.set(record, 12);
  view.setUint32(12 + record.length, maskedCrc32c(record), true);
  return frame;
}

function event(step: number, wallTime: number, summary?: ProtoWriter, fileVersion?: string): Uint8Array {
  const e = new ProtoWriter().double(1, wallTime).int64(2, step);
  if (fileVersion) e.string(3, fileVersion);
  if (summary) e.message(5, summary);
  return e.finish();
}

/** A histogram of `values` in `buckets` equal-width buckets, as HistogramProto. */
export function histogramProto(values: readonly number[], buckets = 30): ProtoWriter {
  const finite = values.filter(Number.isFinite);
  // a loop, not Math.min(...values): a step's token staleness can be more values than call arguments
  let min = finite.length ? Number.POSITIVE_INFINITY : 0;
  let max = finite.length ? Number.NEGATIVE_INFINITY : 0;
  for (const v of finite) {
    if (v < min) min = v;
    if (v > max) max = v;
  }
  const width = max > min ? (max - min) / buckets : 1;
  const limits = Array.from({ length: buckets }, (_, i) => (i === buckets - 1 ? max : min + width * (i + 1)));
  const counts = new Array<number>(buckets).fill(0);
  for (const v of finite) counts[Math.min(buckets - 1, Math.floor((v - min) / width))]! += 1;
  return new ProtoWriter()
    .double(1, min)
    .double(2, max)
    .double(3, finite.length)
    .double(
      4,
      finite.reduce((s, v) => s + v, 0),
    )
    .double(
      5,
      finite.reduce((s, v) => s + v * v, 0),
    )
    .packedDoubles(6, limits)
    .packedDoubles(7, counts);
}

/** The first event of every file. `wallTime` in ms since the epoch, as in all these encoders. */
export function fileVersionEvent(wallTime: number): Uint8Array {
  return event(0, wallTime / 1000, undefined, "brain.Event:2");
}

/** Every finite value of `values` as a scalar at `step`, in one Event. */
export function scalarsEvent(step: number, wallTime: number, values: Readonly<Record<string, number>>): Uint8Array {
  const summary = new ProtoWriter();
  for (const [tag, value] of Object.entries(values)) {
    if (!Number.isFinite(value)) continue;
    summary.message(1, new ProtoWriter().string(1, tag).float(2, value));
  }
  return event(step, wallTime / 1000, summary);
}

export function histogramEvent(step: number, wallTime: number, tag: string, values: readonly number[]): Uint8Array {
  const summary = new ProtoWriter().message(1, new ProtoWriter().string(1, tag).message(5, histogramProto(values)));
  return event(step, wallTime / 1000, summary);
}

/** Markdown as the text plugin's string tensor. */
export function textEvent(step: number, wallTime: number, tag: string, markdown: string): Uint8Array {
  const metadata = new ProtoWriter().message(1, new ProtoWriter().string(1, "text"));
  const tensor = new ProtoWriter()
    .int64(1, 7) // DT_STRING
    .message(2, new ProtoWriter()) // a scalar shape
    .bytes(8, new TextEncoder().encode(markdown));
  const value = new ProtoWriter().string(1, tag).message(8, tensor).message(9, metadata);
  return event(step, wallTime / 1000, new ProtoWriter().message(1, value));
}

/** A tracker record as an Event, or undefined for kinds TensorBoard has no place for (params). */
export function recordEvent(record: TrackerRecord): Uint8Array | undefined {
  if (record.kind === "scalars") return scalarsEvent(record.step, record.wallTime, record.values);
  if (record.kind === "histogram") return histogramEvent(record.step, record.wallTime, record.tag, record.values);
  if (record.kind === "text") return textEvent(record.step, record.wallTime, record.tag, record.markdown);
  return undefined;
}

/** Writes one run's event file; every call appends whole frames (a crash leaves whole records behind). */
export class TensorBoardWriter {
  private fd: number | undefined;

  /** The event file (`events.out.tfevents.<seconds>.<host>.<pid>`). */
  readonly file: string;

  constructor(dir: string, now: () => number = Date.now) {
    this.now = now;
    mkdirSync(dir, { recursive: true });
    this.file = join(dir, `events.out.tfevents.${Math.floor(now() / 1000)}.${hostname()}.${process.pid}`);
    this.fd = openSync(this.file, "a");
    this.append(fileVersionEvent(now()));
  }

  private readonly now: () => number;

  /** Appends one encoded Event (see the encoders above) as a frame. */
  append(record: Uint8Array): void {
    if (this.fd === undefined) throw new Error(`${this.file} is closed`);
    writeSync(this.fd, tfRecord(record));
  }

  /** Every finite value as a scalar at `step` (tags as given: `loss/total`, `task/db/success`). */
  scalars(step: number, values: Readonly<Record<string, number>>, wallTime = this.now()): void {
    this.append(scalarsEvent(step, wallTime, values));
  }

  histogram(step: number, tag: string, values: readonly number[], wallTime = this.now()): void {
    this.append(histogramEvent(step, wallTime, tag, values));
  }

  /** Markdown text (the text plugin's string tensor): the closing evaluation table, for one. */
  text(step: number, tag: string, markdown: string, wallTime = this.now()): void {
    this.append(textEvent(step, wallTime, tag, markdown));
  }

  close(): void {
    if (this.fd === undefined) return;
    closeSync(this.fd);
    this.fd = undefined;
  }
}

/** TensorBoard as a tracker sink: the event file is opened on the first write, so a folder that cannot be made is a dropped write, not a failed trainer. */
export class TensorBoardSink implements TrackerSink {
  readonly name = "tensorboard";
  private writer: TensorBoardWriter | undefined;

  constructor(
    private readonly dir: string,
    private readonly now: () => number = Date.now,
  ) {}

  async write(records: readonly TrackerRecord[]): Promise<void> {
    this.writer ??= new TensorBoardWriter(this.dir, this.now);
    for (const record of records) {
      const encoded = recordEvent(record);
      if (encoded) this.writer.append(encoded);
    }
  }

  async finish(_status: RunStatus): Promise<void> {
    this.writer?.close();
  }
}

/** Event files in an object store roll over to a new object past this size (1 MiB). */
const STORE_ROLL_BYTES = 1 << 20;

/**
 * TensorBoard in an object store: on AWS the trajectory bucket, which TensorBoard reads as
 * `tensorboard --logdir s3://<bucket>/tensorboard/<experimentId>/`. An object cannot be appended
 * to, so the current event file is put whole after each batch (a batch is written or not, never
 * half), and once it passes 1 MiB the next batch starts a new file; TensorBoard reads every event
 * file under the prefix.
 */
export class StoreTensorBoardSink implements TrackerSink {
  readonly name = "tensorboard";
  private frames: Uint8Array[] = [];
  private bytes = 0;
  private seq = 0;
  private readonly base: string;

  constructor(
    private readonly store: Pick<ObjectStore, "put">,
    prefix: string,
    private readonly now: () => number = Date.now,
    private readonly rollBytes = STORE_ROLL_BYTES,
  ) {
    this.base = `${prefix}events.out.tfevents.${Math.floor(now() / 1000)}.${hostname()}.${process.pid}`;
  }

  /** The object being written now. */
  key(): string {
    return `${this.base}.${String(this.seq).padStart(6, "0")}`;
  }

  async write(records: readonly TrackerRecord[]): Promise<void> {
    const added = records.flatMap((r) => {
      const encoded = recordEvent(r);
      return encoded ? [tfRecord(encoded)] : [];
    });
    if (this.frames.length === 0) added.unshift(tfRecord(fileVersionEvent(this.now())));
    const frames = [...this.frames, ...added];
    await this.store.put(this.key(), Buffer.concat(frames));
    // only once stored: a retried batch is not added twice
    this.frames = frames;
    this.bytes += added.reduce((sum, f) => sum + f.length, 0);
    if (this.bytes >= this.rollBytes) {
      this.seq += 1;
      this.frames = [];
      this.bytes = 0;
    }
  }

  async finish(_status: RunStatus): Promise<void> {}
}
