import { z } from "zod";
import { ModelConfig } from "../config/policy.ts";

/**
 * Messages between the data-parallel coordinator (dataParallel.ts) and its replica threads
 * (dataParallelWorker.ts). Gradients do not travel in messages: each thread writes its shard's
 * summed gradient into its own slot of one SharedArrayBuffer; messages only say it is there.
 * A step's loss input and stats are whatever the loss module defines (structured-cloneable); the
 * module's own code builds and reads them on both sides, so they pass here as unknown.
 */

// z.custom rather than z.instanceof: the arrays may sit on any buffer (values() copies, transfers).
const Floats = z.custom<Float32Array>((v) => v instanceof Float32Array, "expected a Float32Array");
const Ints = z.custom<Int32Array>((v) => v instanceof Int32Array, "expected an Int32Array");

/** Adam's moments per parameter (checkpoint order) and their update count. */
const ReplicaOptimizerState = z.object({ t: z.number().int().min(1), m: z.array(Floats), v: z.array(Floats) });

/** Weights (checkpoint order), step and Adam state: what makes a replica equal to the main policy. */
const ReplicaWeights = z.object({
  values: z.array(Floats),
  step: z.number().int().min(0),
  state: ReplicaOptimizerState.optional(),
});
export type ReplicaWeights = z.infer<typeof ReplicaWeights>;

const OptimizerFields = z.object({
  learningRate: z.number(),
  adamBeta1: z.number(),
  adamBeta2: z.number(),
  adamEps: z.number(),
  gradClip: z.number(),
  microBatchTokens: z.number().int(),
});

export const ToReplica = z.discriminatedUnion("type", [
  ReplicaWeights.extend({
    type: z.literal("init"),
    backend: z.enum(["wasm", "cpu", "tensorflow"]),
    config: ModelConfig,
    names: z.array(z.string()),
    version: z.number().int(),
    optimizer: OptimizerFields,
    /** threads × parameters float32 values: slot k holds thread k's summed shard gradient. */
    grads: z.instanceof(SharedArrayBuffer),
    slot: z.number().int().min(1),
    threads: z.number().int().min(2),
    /** URL of the loss module (its default export is a ShardLossModule). */
    lossUrl: z.string(),
    /** A frozen policy's weights (checkpoint order), for `logProbs` under "reference" (the KL reference). */
    reference: z.array(Floats).optional(),
  }),
  ReplicaWeights.extend({ type: z.literal("load") }),
  z.object({
    type: z.literal("step"),
    id: z.number().int(),
    temperature: z.number(),
    /** This shard's rows: indices into the step's whole batch, ascending. */
    rows: z.array(z.number().int().min(0)),
    sequences: z.array(Ints),
    input: z.unknown(),
    optimizer: OptimizerFields,
  }),
  /** Forward only: this shard's per-token log-probs under the trained weights or the reference. */
  z.object({
    type: z.literal("logProbs"),
    id: z.number().int(),
    which: z.enum(["policy", "reference"]),
    temperature: z.number(),
    sequences: z.array(Ints),
  }),
  /** Every slot is written: sum them and take the Adam step. */
  z.object({ type: z.literal("apply"), id: z.number().int() }),
  /** Some shard failed: leave the weights as they are. */
  z.object({ type: z.literal("skip"), id: z.number().int() }),
  z.object({ type: z.literal("values"), id: z.number().int() }),
  z.object({ type: z.literal("stop") }),
]);
export type ToReplica = z.infer<typeof ToReplica>;

export const FromReplica = z.discriminatedUnion("type", [
  z.object({ type: z.literal("ready") }),
  z.object({ type: z.literal("initFailed"), message: z.string() }),
  /** This thread's slot holds its shard's gradient. */
  z.object({
    type: z.literal("grads"),
    id: z.number().int(),
    loss: z.number(),
    stats: z.unknown(),
    /** Time this thread spent on its shard. */
    ms: z.number(),
  }),
  z.object({ type: z.literal("failed"), id: z.number().int(), message: z.string() }),
  z.object({ type: z.literal("logProbs"), id: z.number().int(), values: z.array(Floats) }),
  z.object({ type: z.literal("applied"), id: z.number().int(), gradNorm: z.number() }),
  z.object({ type: z.literal("applyFailed"), id: z.number().int(), message: z.string() }),
  z.object({ type: z.literal("values"), id: z.number().int(), values: z.array(Floats), step: z.number().int() }),
]);
export type FromReplica = z.infer<typeof FromReplica>;
