import { saveCheckpoint } from "../../shared/model/checkpoint.ts";
import type { TransformerPolicy } from "../../shared/model/transformer.ts";
import { HF_METADATA_FILE, versionPrefix } from "../../shared/protocol/checkpoints.ts";
import type { PolicyPublished } from "../../shared/protocol/messages.ts";
import type { ObjectStore, Queue } from "../../shared/transport/types.ts";
import type { HfPublisher, HfPublishResult } from "./hf-publish.ts";
import { type Ledger, writeLedger } from "./ledger.ts";

export interface PublishInput {
  readonly checkpoints: ObjectStore;
  readonly events: Pick<Queue, "send">;
  readonly policy: TransformerPolicy;
  /** The ledger of the version being published (its version, step, consumed ids, totals). */
  readonly ledger: Ledger;
  /** The last published version (the manifest's parent). */
  readonly parent: number;
  readonly metrics: Readonly<Record<string, number>>;
  readonly tokenizerJson: string;
  readonly saveOptimizerState: boolean;
  /** `policy.exportHf`: also write policies/vN/hf/ and sync the configured engines to it. */
  readonly hf?: HfPublisher;
  /** Logs an export that failed (the version stays published; only its Hugging Face copy is missing). */
  readonly onHfError?: (error: unknown) => void;
}

/**
 * Publishes one version, in the order that makes a crash at any point safe: the ledger (what
 * this version has consumed), then the checkpoint with its manifest last (a version exists only
 * once its manifest does), then the PolicyPublished event. The caller acknowledges the consumed
 * messages only after this returns. With `hf`, the Hugging Face folder is written and the engines
 * synced after the manifest and before the event, so whoever reacts to the event finds it.
 */
export async function publishVersion(
  input: PublishInput,
): Promise<PolicyPublished & { readonly hf?: HfPublishResult }> {
  const { ledger } = input;
  await writeLedger(input.checkpoints, ledger);
  // A model imported from Hugging Face keeps its hf.json (architecture, dtype, chat template) in every version.
  const hfMetadataJson = await input.checkpoints.getText(`${versionPrefix(input.parent)}${HF_METADATA_FILE}`);
  const numeric = Object.fromEntries(Object.entries(input.metrics).filter(([, v]) => Number.isFinite(v)));
  await saveCheckpoint(input.checkpoints, input.policy, {
    version: ledger.version,
    step: ledger.step,
    parent: input.parent,
    metrics: numeric,
    tokenizerJson: input.tokenizerJson,
    optimizerState: input.saveOptimizerState,
    ...(hfMetadataJson === undefined ? {} : { hfMetadataJson }),
  });
  let hf: HfPublishResult | undefined;
  if (input.hf)
    hf = await input.hf.publish(input.checkpoints, ledger.version).catch((error: unknown) => {
      input.onHfError?.(error);
      return undefined;
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
  return hf ? { ...event, hf } : event;
}
