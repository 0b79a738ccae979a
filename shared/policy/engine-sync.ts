import { z } from "zod";
import { AgentRlError, parseJsonOrThrow } from "../errors.ts";
import { sleep } from "../sleep.ts";
import type { ObjectStore } from "../transport/types.ts";

/**
 * Version attribution for engines that do not say which weights produced an answer (vLLM).
 *
 * The trainer's syncer keeps one record per engine in the checkpoint store, engines/<id>.json
 * `{version, state, seq}`: it writes `loading vN` (seq + 1) BEFORE it touches the engine and
 * `ready vN` (seq + 2) only after the engine confirmed the load; seq only grows, and a failed load
 * leaves `loading` (what the engine serves is then unknown). A rollout worker attributes an answer
 * to vN only when a read of the record made before it sent the request and a read begun after the
 * answer arrived both say `ready` with the same seq: any reload that touched the engine while the
 * request ran wrote `loading` before it started, so the second read sees a newer seq.
 *
 * Why not cheaper: following the record by polling, or trusting one read made only before or only
 * after, cannot see a reload that starts during the request, and timing bounds (a grace period
 * before each reload) hold only while clocks and polls keep to them. What is saved instead: the
 * read before sending need not be fresh, since any earlier read works (a write in between changes
 * the seq the read after sees), so it is the newest read this worker made; and concurrent requests
 * share the reads after (one in flight, one queued). About one store read per answer instead of
 * two; the price is that a request sent after a reload began, before this worker's next read, is
 * answered and then discarded, as one in flight when the reload began is anyway.
 * Sound as long as the store reads its own writes (S3 does since 2020; the local store renames)
 * and only the syncer loads weights into the engine: an engine restarted by hand must be synced again.
 */

/** An engine id: the key of its sync record, engines/<id>.json (lowercase letters, digits, '-'). */
export const ENGINE_ID_PATTERN = /^[a-z0-9][a-z0-9-]{0,62}$/;

/**
 * The id of an engine's sync record: `id`, else host and port of its URL.
 * @example engineIdOf({ url: "http://vllm:8000" }) // "vllm-8000"
 */
export function engineIdOf(engine: { readonly id?: string | undefined; readonly url: string }): string {
  if (engine.id !== undefined) return engine.id;
  const url = new URL(engine.url);
  const port = url.port || (url.protocol === "https:" ? "443" : "80");
  const slug = `${url.hostname}-${port}`
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+/, "");
  return slug.slice(0, 63);
}

/** Key prefix of the engines' sync records in the checkpoint store. */
export const ENGINE_RECORD_PREFIX = "engines/";

/** One engine's sync record. */
export const EngineRecord = z
  .object({
    schemaVersion: z.literal(1),
    engineId: z.string().regex(ENGINE_ID_PATTERN),
    /** The version being loaded (`loading`) or served (`ready`). */
    version: z.number().int().nonnegative(),
    state: z.enum(["loading", "ready"]),
    /** Grows by one with every write: equal seqs mean no write in between. */
    seq: z.number().int().positive(),
    updatedAt: z.string(),
  })
  .strict();
export type EngineRecord = z.infer<typeof EngineRecord>;

/** A record that says the engine serves `version`. */
export type ReadyRecord = EngineRecord & { readonly state: "ready" };

/** The record is missing, malformed or not ready in time; no answer of the engine can be attributed. */
export class EngineRecordError extends AgentRlError {
  override readonly name = "EngineRecordError";
}

/** engines/<id>.json */
export function engineRecordKey(engineId: string): string {
  if (!ENGINE_ID_PATTERN.test(engineId)) throw new EngineRecordError(`invalid engine id "${engineId}"`);
  return `${ENGINE_RECORD_PREFIX}${engineId}.json`;
}

/** Reads an engine's record; undefined when it does not exist, EngineRecordError when it is malformed. */
export async function readEngineRecord(
  store: Pick<ObjectStore, "getText">,
  engineId: string,
): Promise<EngineRecord | undefined> {
  const key = engineRecordKey(engineId);
  const text = await store.getText(key);
  if (text === undefined) return undefined;
  try {
    const record = parseJsonOrThrow(EngineRecord, text, key);
    if (record.engineId !== engineId) throw new Error(`${key} names engine "${record.engineId}"`);
    return record;
  } catch (error) {
    throw new EngineRecordError(`${key}: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * The syncer's side: brackets `load` (the call that makes the engine load `version`) with the
 * record's `loading` and `ready` writes. When `load` throws, the record stays `loading` and the
 * error propagates: nobody can tell what the engine serves until a later load succeeds.
 * @example await withEngineRecord(checkpoints, "vllm-8000", 7, () => reloadVllmWeights(url, 7))
 */
export async function withEngineRecord(
  store: Pick<ObjectStore, "getText" | "put">,
  engineId: string,
  version: number,
  load: () => Promise<void>,
): Promise<ReadyRecord> {
  // The seq continues from the stored record, so a restarted trainer never reuses one.
  const seq = (await readEngineRecord(store, engineId))?.seq ?? 0;
  const write = async <S extends EngineRecord["state"]>(state: S, at: number) => {
    const record = {
      schemaVersion: 1 as const,
      engineId,
      version,
      state,
      seq: at,
      updatedAt: new Date().toISOString(),
    };
    await store.put(engineRecordKey(engineId), JSON.stringify(record));
    return record;
  };
  await write("loading", seq + 1);
  await load();
  return write("ready", seq + 2);
}

/** True when two reads say the same ready record: no write happened between them. */
export function sameReady(before: ReadyRecord, after: EngineRecord | undefined): after is ReadyRecord {
  return after !== undefined && after.state === "ready" && after.seq === before.seq && after.version === before.version;
}

/** What a discarded answer was read between. */
export interface VersionDiscard {
  readonly engineId: string;
  readonly before: ReadyRecord;
  readonly after: EngineRecord | undefined;
}

export interface EngineVersionWatchOptions {
  /** Answers discarded in one turn before the turn fails as unavailable (`rollout.syncRetries`). @default 3 */
  readonly retries?: number;
  /** Pause between reads while the record is missing or `loading`. @default 250 */
  readonly pollMs?: number;
  /** Called for every discarded answer (the worker logs it). */
  readonly onDiscard?: (discard: VersionDiscard) => void;
}

/**
 * The rollout side: reads one engine's record for a pool with `rollout.versionSource: sync`
 * (see the comment at the top of this file for why two reads, and why the first may be cached).
 * @example
 * const watch = new EngineVersionWatch(transport.store("checkpoints"), "vllm-8000");
 * const before = await watch.ready(60_000); // send, receive, then:
 * if (!sameReady(before, await watch.fresh())) watch.discard(before, ...);
 */
export class EngineVersionWatch {
  readonly retries: number;
  /** Reads of the record so far. */
  reads = 0;
  /** Answers discarded because a reload may have touched them. */
  discarded = 0;
  private last: EngineRecord | undefined;
  private inflight: Promise<EngineRecord | undefined> | undefined;
  private queued: Promise<EngineRecord | undefined> | undefined;

  constructor(
    private readonly store: Pick<ObjectStore, "getText">,
    readonly engineId: string,
    private readonly options: EngineVersionWatchOptions = {},
  ) {
    engineRecordKey(engineId);
    this.retries = options.retries ?? 3;
  }

  /** A read of the record that begins after this call; concurrent callers share one. */
  fresh(): Promise<EngineRecord | undefined> {
    if (this.queued) return this.queued;
    if (!this.inflight) return this.start();
    // The read in flight began before this call: wait for it, then share the next one.
    const next = this.inflight
      .catch(() => undefined)
      .then(() => {
        this.queued = undefined;
        return this.start();
      });
    this.queued = next;
    return next;
  }

  private start(): Promise<EngineRecord | undefined> {
    this.reads += 1;
    const read: Promise<EngineRecord | undefined> = readEngineRecord(this.store, this.engineId)
      .then((record) => {
        this.last = record;
        return record;
      })
      .finally(() => {
        if (this.inflight === read) this.inflight = undefined;
      });
    this.inflight = read;
    return read;
  }

  /**
   * A ready record read before now: the newest read when it says ready, else fresh reads every
   * `pollMs` until one does (a reload in progress). EngineRecordError after `waitMs`.
   */
  async ready(waitMs: number, signal?: AbortSignal): Promise<ReadyRecord> {
    const deadline = Date.now() + waitMs;
    let record = this.last?.state === "ready" ? this.last : await this.fresh();
    for (;;) {
      if (record?.state === "ready") return record as ReadyRecord;
      if (Date.now() >= deadline) {
        const key = engineRecordKey(this.engineId);
        throw new EngineRecordError(
          record === undefined
            ? `${key} does not exist: the trainer writes it when it syncs policy.syncEngines[id=${this.engineId}]`
            : `${key} still says loading v${record.version} after ${waitMs} ms: the engine's last load did not complete`,
        );
      }
      await sleep(Math.min(this.options.pollMs ?? 250, Math.max(0, deadline - Date.now())), signal);
      if (signal?.aborted) throw signal.reason;
      record = await this.fresh();
    }
  }

  /** Counts (and reports) an answer that cannot be attributed. */
  discard(before: ReadyRecord, after: EngineRecord | undefined): void {
    this.discarded += 1;
    this.options.onDiscard?.({ engineId: this.engineId, before, after });
  }
}
