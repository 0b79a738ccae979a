import type { ObjectInfo, ObjectStore } from "../../shared/transport/types.ts";

/** A tiny in-memory ObjectStore for model tests; `failOn` makes puts of matching keys throw (a crash mid-save). */
export class MemoryStore implements ObjectStore {
  readonly objects = new Map<string, { body: Uint8Array; lastModified: Date }>();
  /** Keys in the order they were written. */
  readonly writes: string[] = [];
  failOn: RegExp | undefined;

  async put(key: string, body: Uint8Array | string): Promise<void> {
    if (this.failOn?.test(key)) throw new Error(`simulated crash writing ${key}`);
    this.objects.set(key, {
      body: typeof body === "string" ? new TextEncoder().encode(body) : Uint8Array.from(body),
      lastModified: new Date(),
    });
    this.writes.push(key);
  }

  async putIfAbsent(key: string, body: Uint8Array | string): Promise<boolean> {
    if (this.objects.has(key)) return false;
    await this.put(key, body);
    return true;
  }

  async get(key: string): Promise<Uint8Array | undefined> {
    return this.objects.get(key)?.body;
  }

  async getText(key: string): Promise<string | undefined> {
    const body = this.objects.get(key)?.body;
    return body && new TextDecoder().decode(body);
  }

  async head(key: string): Promise<ObjectInfo | undefined> {
    const o = this.objects.get(key);
    return o && { key, size: o.body.length, lastModified: o.lastModified };
  }

  async list(prefix: string): Promise<ObjectInfo[]> {
    return [...this.objects.keys()]
      .filter((k) => k.startsWith(prefix))
      .sort()
      .map((key) => ({
        key,
        size: this.objects.get(key)!.body.length,
        lastModified: this.objects.get(key)!.lastModified,
      }));
  }

  async delete(key: string): Promise<void> {
    this.objects.delete(key);
  }
}

/** A small model config that keeps tests fast while exercising GQA (4 heads, 2 kv heads). */
export const SMALL = {
  vocabSize: 300,
  dModel: 32,
  layers: 2,
  heads: 4,
  kvHeads: 2,
  ffnHidden: 48,
  contextLength: 64,
} as const;

/** Deterministic token sequence of `length` ids below `vocab`. */
export function tokens(length: number, salt: number, vocab = SMALL.vocabSize): Int32Array {
  return Int32Array.from({ length }, (_, i) => (i * 7919 + salt * 104_729 + 13) % vocab);
}
