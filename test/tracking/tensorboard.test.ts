import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../shared/config/index.ts";
import { crc32c, maskedCrc32c } from "../../shared/tracking/crc32c.ts";
import { openTrackers, tensorboardPrefix } from "../../shared/tracking/index.ts";
import { StoreTensorBoardSink, TensorBoardWriter } from "../../shared/tracking/tensorboard.ts";
import { QueuedTracker } from "../../shared/tracking/tracker.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { commandMissing, requireOrSkip } from "../support/requirements.ts";
import { decodeEvent, decodeEventFolder, decodeRaw, tfRecordFrames } from "../support/tfrecord.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * The TensorBoard event file, read back by an independent decoder: Debian's `protoc --decode_raw`
 * parses each record's protobuf, and the frames' CRCs are checked against CRC-32C's published
 * check values.
 */
const ready = requireOrSkip(
  "tensorboard.test.ts",
  "TensorBoard files decoded by protoc",
  commandMissing("protoc", "apt-get install -y protobuf-compiler"),
);

const ascii = (text: string) => new TextEncoder().encode(text);

/** protoc prints a fixed32 field as hex: the float32 bits of `value`. */
function float32Hex(value: number): string {
  const bytes = new DataView(new ArrayBuffer(4));
  bytes.setFloat32(0, value, true);
  return `0x${bytes.getUint32(0, true).toString(16).padStart(8, "0")}`;
}

describe("CRC-32C and TensorFlow's mask", () => {
  it("match the published check values", () => {
    expect(crc32c(ascii("123456789"))).toBe(0xe3069283);
    expect(crc32c(new Uint8Array(32))).toBe(0x8a9136aa);
    expect(crc32c(new Uint8Array(32).fill(0xff))).toBe(0x62a8ab43);
    expect(crc32c(new Uint8Array(0))).toBe(0);
    expect(maskedCrc32c(ascii("123456789"))).toBe(0xc78ab0e5);
  });
});

describe.skipIf(!ready)("TensorBoard event files", () => {
  it("holds the file version, every scalar at its step, a histogram and a text, readable by protoc", () => {
    const dir = tempDir("agentrl-tb-");
    let clock = 1_700_000_000_000;
    const writer = new TensorBoardWriter(dir, () => (clock += 1000));
    const metrics = {
      "loss/total": 0.25,
      "task/db/success": 0.5,
      "rollout/staleness_mean": 1.5,
      "bad/nan": Number.NaN,
    };
    writer.scalars(3, metrics);
    writer.histogram(3, "advantages", [-1, -0.5, 0, 0.5, 1, 1]);
    writer.text(4, "evaluation", "| policy | db |\n|---|---|\n| v4 | 12.0 |");
    writer.close();
    expect(writer.file).toMatch(/events\.out\.tfevents\.\d+\./);
    const [version, scalars, histogram, text, ...rest] = tfRecordFrames(readFileSync(join(writer.file)));
    expect(rest).toEqual([]);

    expect(decodeRaw(version!)).toMatch(/3: "brain.Event:2"/);
    const decoded = decodeRaw(scalars!);
    expect(decoded).toMatch(/^2: 3$/m);
    for (const [tag, value] of Object.entries(metrics)) {
      if (Number.isNaN(value)) {
        expect(decoded).not.toContain(tag);
        continue;
      }
      expect(decoded).toContain(`1: "${tag}"`);
      expect(decoded).toContain(`2: ${float32Hex(value)}`);
    }
    const histo = decodeRaw(histogram!);
    expect(histo).toContain('1: "advantages"');
    expect(histo).toMatch(/5 \{[^}]*3: 0x4018000000000000/s); // num = 6.0 as a double
    const textOut = decodeRaw(text!);
    expect(textOut).toContain('1: "evaluation"');
    expect(textOut).toContain('1: "text"');
    expect(textOut).toContain("| v4 | 12.0 |");
    expect(textOut).toMatch(/^2: 4$/m);
  });

  it("is written through the tracker queue: the trainer's scalars, histograms and the evaluation text, in order", async () => {
    const runFolder = tempDir("agentrl-tb-");
    const warnings: string[] = [];
    const tracker = openTrackers(parseConfig({}).tracking, {
      runFolder,
      runName: "r",
      env: {},
      warn: (m) => warnings.push(m),
    });
    tracker.params({ lr: "0.1" }); // TensorBoard has no params: ignored
    tracker.scalars(1, { "loss/total": 0.5, "tracking/dropped": 0, "staleness/0": 12 });
    tracker.histogram(
      1,
      "staleness",
      Array.from({ length: 200_000 }, (_, i) => i % 3),
    ); // more than a call's arguments
    tracker.text(2, "evaluation", "| policy | avg |");
    await tracker.finish("FINISHED");
    expect(warnings).toEqual([]);
    expect(tracker.dropped).toBe(0);
    const dir = join(runFolder, "tensorboard");
    const [file, ...others] = readdirSync(dir);
    expect(others).toEqual([]);
    const records = tfRecordFrames(readFileSync(join(dir, file!))).map(decodeRaw);
    expect(records).toHaveLength(4);
    expect(records[1]).toContain('1: "loss/total"');
    expect(records[2]).toContain('1: "staleness"');
    expect(records[2]).toMatch(/5 \{[^}]*2: 0x4000000000000000/s); // max = 2.0
    expect(records[3]).toContain("| policy | avg |");
    // decoded with types (TensorFlow's field numbers): every tag as a string, whatever its bytes
    const typed = decodeEventFolder(dir);
    expect(typed[0]).toContain('file_version: "brain.Event:2"');
    for (const tag of ["loss/total", "tracking/dropped", "staleness/0"]) expect(typed[1]).toContain(`tag: "${tag}"`);
    expect(typed[1]).toContain("simple_value: 12");
    expect(typed[2]).toMatch(/histo \{[^}]*max: 2[^}]*num: 200000/s);
    expect(typed[3]).toContain('plugin_name: "text"');
  });

  it("goes to the trajectory store on the AWS transport: whole event files per batch, rolled past their size, none doubled by a retry", async () => {
    const config = parseConfig({ experimentId: "tb-store", transport: { localDir: tempDir("agentrl-tb-") } });
    const transport = await createTransport(config.transport);
    const store = transport.store("trajectories");
    let failures = 1;
    const flaky = {
      put: async (key: string, body: Uint8Array | string) => {
        if (failures-- > 0) throw new Error("S3 away");
        await store.put(key, body);
      },
    };
    // one record at a time and a tiny roll size, so that files roll and the failed put is retried
    const tracker = new QueuedTracker(new StoreTensorBoardSink(flaky, tensorboardPrefix("tb-store"), Date.now, 200), {
      queueLimit: 100,
      retries: 2,
      retryBaseSeconds: 0.001,
      finishSeconds: 10,
      batchLimit: 1,
      warn: () => {},
    });
    for (let step = 1; step <= 6; step += 1) tracker.scalars(step, { "loss/total": 1 / step, "staleness/0": step });
    await tracker.finish("FINISHED");
    expect(tracker.dropped).toBe(0);
    const objects = await store.list("tensorboard/tb-store/");
    expect(objects.length).toBeGreaterThan(1);
    expect(objects.every((o) => /\/events\.out\.tfevents\.\d+\.[^/]+\.\d+\.\d{6}$/.test(o.key))).toBe(true);
    const decoded: string[] = [];
    for (const o of objects) decoded.push(...tfRecordFrames((await store.get(o.key)) as Uint8Array).map(decodeEvent));
    // every file opens with the file version; every step is there exactly once
    expect(decoded.filter((d) => d.includes("file_version")).length).toBe(objects.length);
    const steps = decoded.flatMap((d) => [...d.matchAll(/^step: (\d+)$/gm)].map((m) => Number(m[1])));
    expect(steps).toEqual([1, 2, 3, 4, 5, 6]);
    await transport.close();
  });
});
