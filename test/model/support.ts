import { MemoryObjectStore } from "../../shared/transport/memory.ts";

/** The in-memory ObjectStore with a write log; `failOn` makes puts of matching keys throw (a crash mid-save). */
export class MemoryStore extends MemoryObjectStore {
  /** Keys in the order they were written. */
  readonly writes: string[] = [];
  failOn: RegExp | undefined;

  override async put(key: string, body: Uint8Array | string): Promise<void> {
    if (this.failOn?.test(key)) throw new Error(`simulated crash writing ${key}`);
    await super.put(key, body);
    this.writes.push(key);
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
