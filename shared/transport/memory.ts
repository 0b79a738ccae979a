import type { ObjectInfo, ObjectStore } from "./types.ts";

/**
 * An ObjectStore in process memory: a checkpoint made on the fly (a Hugging Face folder imported
 * at start-up) that nothing else needs to read. Lost when the process ends.
 */
export class MemoryObjectStore implements ObjectStore {
  protected readonly objects = new Map<string, { body: Uint8Array; lastModified: Date }>();

  async put(key: string, body: Uint8Array | string): Promise<void> {
    this.objects.set(key, {
      body: typeof body === "string" ? new TextEncoder().encode(body) : Uint8Array.from(body),
      lastModified: new Date(),
    });
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
    return [...this.objects.entries()]
      .filter(([key]) => key.startsWith(prefix))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([key, o]) => ({ key, size: o.body.length, lastModified: o.lastModified }));
  }

  async delete(key: string): Promise<void> {
    this.objects.delete(key);
  }
}
