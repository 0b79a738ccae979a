import { saveCheckpoint } from "../../shared/model/checkpoint.ts";
import type { TransformerPolicy } from "../../shared/model/transformer.ts";
import { versionPrefix } from "../../shared/protocol/checkpoints.ts";
import type { PolicyPublished } from "../../shared/protocol/messages.ts";
import type { ObjectStore, Queue } from "../../shared/transport/types.ts";
import { type Ledger, writeLedger } from "./ledger.ts";

export interface PublishInput {
  readonly checkpoints: ObjectStore;
  readonly events: Queue;
  readonly policy: TransformerPolicy;
  /** The ledger of the version being published (its version, step, consumed ids, totals). */
  readonly ledger: Ledger;
  /** The last published version (the manifest's parent). */
  readonly parent: number;
  readonly metrics: Readonly<Record<string, number>>;
  readonly tokenizerJson: string;
  readonly saveOptimizerState: boolean;
}

/**
 * Publishes one version, in the order that makes a crash at any point safe: the ledger (what
 * this version has consumed), then the checkpoint with its manifest last (a version exists only
 * once its manifest does), then the PolicyPublished event. The caller acknowledges the consumed
 * messages only after this returns.
 */
export async function publishVersion(input: PublishInput): Promise<PolicyPublished> {
  const { ledger } = input;
  await writeLedger(input.checkpoints, ledger);
  const numeric = Object.fromEntries(Object.entries(input.metrics).filter(([, v]) => Number.isFinite(v)));
  await saveCheckpoint(input.checkpoints, input.policy, {
    version: ledger.version,
    step: ledger.step,
    parent: input.parent,
    metrics: numeric,
    tokenizerJson: input.tokenizerJson,
    optimizerState: input.saveOptimizerState,
  });
  const event: PolicyPublished = {
    schemaVersion: 1,
    experimentId: ledger.experimentId,
    version: ledger.version,
    key: versionPrefix(ledger.version),
    step: ledger.step,
    createdAt: new Date().toISOString(),
  };
  await input.events.send(JSON.stringify(event));
  return event;
}
