/**
 * A data-parallel replica thread (started by DataParallelTrainer): its own TF.js backend and its
 * own copy of the weights and Adam state. Per step it computes its shard's gradient into its slot
 * of the shared buffer, then, told every slot is written, applies the same summed step as the
 * main thread.
 */
import { parentPort } from "node:worker_threads";
import type { ModelConfig } from "../config/policy.ts";
import { initBackend } from "./backend.ts";
import { computeShard, gradientLayout, type ShardLossModule, sumSlots } from "./dataParallel.ts";
import { type FromReplica, type ReplicaWeights, ToReplica } from "./dataParallelProtocol.ts";
import { type OptimizerOptions, TransformerPolicy } from "./transformer.ts";

const port = parentPort;
if (!port) throw new Error("dataParallelWorker.ts runs as a worker thread (started by DataParallelTrainer)");

function post(message: FromReplica): void {
  port?.postMessage(message);
}

function messageOf(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

interface Setup {
  readonly config: ModelConfig;
  readonly names: readonly string[];
  readonly version: number;
  readonly module: ShardLossModule<unknown, unknown>;
  readonly shared: Float32Array;
  readonly slot: number;
  readonly threads: number;
}

let setup: Setup | undefined;
let replica: TransformerPolicy | undefined;
/** The frozen KL reference, when the coordinator was given one. */
let reference: TransformerPolicy | undefined;

/** A fresh replica from the main policy's weights, step and Adam state (the previous one is disposed). */
function build(weights: ReplicaWeights, optimizer: OptimizerOptions): TransformerPolicy {
  const { config, names, version } = setup as Setup;
  replica?.dispose();
  const values = new Map(names.map((name, i) => [name, weights.values[i] as Float32Array]));
  const policy = new TransformerPolicy(config, values, version, { trainable: true, optimizer });
  policy.step = weights.step;
  if (weights.state) {
    const { t, m, v } = weights.state;
    policy.setOptimizerState({
      t,
      m: new Map(names.map((n, i) => [n, m[i] as Float32Array])),
      v: new Map(names.map((n, i) => [n, v[i] as Float32Array])),
    });
  }
  return policy;
}

function isLossModule(value: unknown): value is ShardLossModule<unknown, unknown> {
  const m = value as Partial<ShardLossModule<unknown, unknown>> | undefined;
  return typeof m?.build === "function" && typeof m.merge === "function";
}

async function handle(message: ToReplica): Promise<void> {
  switch (message.type) {
    case "init": {
      try {
        await initBackend(message.backend);
        const imported: { default?: unknown } = await import(message.lossUrl);
        if (!isLossModule(imported.default))
          throw new Error(`${message.lossUrl} has no default export made by defineShardLoss`);
        setup = {
          config: message.config,
          names: message.names,
          version: message.version,
          module: imported.default,
          shared: new Float32Array(message.grads),
          slot: message.slot,
          threads: message.threads,
        };
        replica = build(message, message.optimizer);
        if (message.reference) {
          const frozen = message.reference;
          const values = new Map(message.names.map((name, i) => [name, frozen[i] as Float32Array]));
          reference = new TransformerPolicy(message.config, values, message.version, { trainable: false });
        }
        post({ type: "ready" });
      } catch (error) {
        post({ type: "initFailed", message: messageOf(error) });
      }
      return;
    }
    case "load":
      replica = build(message, (replica as TransformerPolicy).optimizer);
      return;
    case "step": {
      const { module, shared, slot } = setup as Setup;
      const policy = replica as TransformerPolicy;
      policy.optimizer = { ...message.optimizer };
      const { total } = gradientLayout(policy);
      const started = performance.now();
      try {
        const { loss, stats } = computeShard(
          policy,
          module.build(message.input),
          message.sequences,
          message.rows,
          message.temperature,
          shared.subarray(slot * total, (slot + 1) * total),
        );
        post({ type: "grads", id: message.id, loss, stats, ms: performance.now() - started });
      } catch (error) {
        post({ type: "failed", id: message.id, message: messageOf(error) });
      }
      return;
    }
    case "logProbs": {
      const policy = message.which === "reference" ? reference : replica;
      try {
        if (!policy) throw new Error("this replica was started without a reference policy");
        const values = message.sequences.length > 0 ? policy.logProbs(message.sequences, message.temperature) : [];
        port?.postMessage(
          { type: "logProbs", id: message.id, values } satisfies FromReplica,
          values.map((v) => v.buffer as ArrayBuffer),
        );
      } catch (error) {
        post({ type: "failed", id: message.id, message: messageOf(error) });
      }
      return;
    }
    case "apply": {
      const { shared, threads } = setup as Setup;
      const policy = replica as TransformerPolicy;
      try {
        const gradNorm = policy.applyGradients(sumSlots(policy, shared, threads));
        post({ type: "applied", id: message.id, gradNorm });
      } catch (error) {
        post({ type: "applyFailed", id: message.id, message: messageOf(error) });
      }
      return;
    }
    case "skip":
      return;
    case "values": {
      const policy = replica as TransformerPolicy;
      const values = [...policy.values().values()];
      port?.postMessage(
        { type: "values", id: message.id, values, step: policy.step } satisfies FromReplica,
        values.map((v) => v.buffer as ArrayBuffer),
      );
      return;
    }
    case "stop":
      replica?.dispose();
      reference?.dispose();
      port?.close();
      return;
  }
}

// Messages are handled one at a time, in order: a step's "apply" must follow its "step".
let queue: Promise<void> = Promise.resolve();
port.on("message", (raw: unknown) => {
  const parsed = ToReplica.safeParse(raw);
  if (!parsed.success) {
    // Only the coordinator talks to this thread: a malformed message is a bug there, so stop loudly.
    throw new Error(`data-parallel replica: malformed message: ${parsed.error.message}`);
  }
  queue = queue.then(() => handle(parsed.data));
});
