/**
 * Just enough protobuf encoding for TensorBoard's `Event` and `Summary` messages: varints,
 * doubles, floats and length-delimited fields. Field numbers are the ones of TensorFlow's
 * event.proto and summary.proto.
 */
export class ProtoWriter {
  private readonly parts: Uint8Array[] = [];

  private varint(value: number | bigint): void {
    let v = BigInt(value);
    if (v < 0n) v += 1n << 64n; // two's complement, as int64 fields encode negatives
    const bytes: number[] = [];
    do {
      let byte = Number(v & 0x7fn);
      v >>= 7n;
      if (v > 0n) byte |= 0x80;
      bytes.push(byte);
    } while (v > 0n);
    this.parts.push(Uint8Array.from(bytes));
  }

  private key(field: number, wireType: number): void {
    this.varint((field << 3) | wireType);
  }

  int64(field: number, value: number): this {
    this.key(field, 0);
    this.varint(Math.trunc(value));
    return this;
  }

  double(field: number, value: number): this {
    this.key(field, 1);
    const bytes = new Uint8Array(8);
    new DataView(bytes.buffer).setFloat64(0, value, true);
    this.parts.push(bytes);
    return this;
  }

  float(field: number, value: number): this {
    this.key(field, 5);
    const bytes = new Uint8Array(4);
    new DataView(bytes.buffer).setFloat32(0, value, true);
    this.parts.push(bytes);
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.key(field, 2);
    this.varint(value.length);
    this.parts.push(value);
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, new TextEncoder().encode(value));
  }

  message(field: number, inner: ProtoWriter): this {
    return this.bytes(field, inner.finish());
  }

  /** A packed repeated double field. */
  packedDoubles(field: number, values: readonly number[]): this {
    const bytes = new Uint8Array(8 * values.length);
    const view = new DataView(bytes.buffer);
    for (const [i, v] of values.entries()) view.setFloat64(8 * i, v, true);
    return this.bytes(field, bytes);
  }

  finish(): Uint8Array {
    const total = this.parts.reduce((n, p) => n + p.length, 0);
    const out = new Uint8Array(total);
    let at = 0;
    for (const part of this.parts) {
      out.set(part, at);
      at += part.length;
    }
    return out;
  }
}
