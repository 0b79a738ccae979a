import { z } from "zod";
import { parseJsonOrThrow } from "../../shared/errors.ts";
import { ledgerKey } from "../../shared/protocol/checkpoints.ts";
import type { ObjectStore } from "../../shared/transport/types.ts";

/**
 * The trainer's memory, saved inside each published version as `policies/v{N}/ledger.json`
 * (written before the manifest, so it exists whenever the version does). Loading the newest
 * version restores exactly what had been consumed and counted, so a crash and resume trains
 * nothing twice and loses nothing: messages are acknowledged only after the version holding
 * their ids is published.
 */
export const Ledger = z.object({
  schemaVersion: z.literal(1),
  experimentId: z.string(),
  /** Version this ledger belongs to. */
  version: z.number().int().nonnegative(),
  step: z.number().int().nonnegative(),
  /** The frozen KL reference: the version training started from. */
  referenceVersion: z.number().int().nonnegative(),
  /** Every trajectory id consumed (trained, dropped as stale, or abandoned with its group). */
  consumed: z.array(z.string()),
  /** Cumulative counters (totals/...), exact across restarts. */
  totals: z.record(z.string(), z.number()),
});
export type Ledger = z.infer<typeof Ledger>;

/** Reads the ledger of `version`; undefined when that version has none (e.g. the warm-up checkpoint). */
export async function readLedger(store: ObjectStore, version: number): Promise<Ledger | undefined> {
  const text = await store.getText(ledgerKey(version));
  return text === undefined ? undefined : parseJsonOrThrow(Ledger, text, ledgerKey(version));
}

/** Writes the ledger of `version` (before that version's manifest). */
export async function writeLedger(store: ObjectStore, ledger: Ledger): Promise<void> {
  await store.put(ledgerKey(ledger.version), JSON.stringify(ledger));
}

/** Adds `delta` into cumulative counters. */
export function addTotals(totals: Record<string, number>, delta: Readonly<Record<string, number>>): void {
  for (const [key, value] of Object.entries(delta)) totals[key] = (totals[key] ?? 0) + value;
}
