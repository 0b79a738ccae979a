import { z } from "zod";

/**
 * Messages between the main thread's `webgpu` backend (bridge.ts) and the thread that owns the
 * WebGPU device (worker.ts). Tensors are named by numbers the main thread assigns; only a read
 * brings values back. Requests that need an answer carry `seq`; the answer goes to the reply
 * port, which the main thread reads synchronously (receiveMessageOnPort) while it waits on
 * `signal` — that is what turns Dawn's asynchronous buffer mapping into TF.js's dataSync.
 */

const Values = z.custom<Float32Array | Int32Array | Uint8Array>(
  (v) => v instanceof Float32Array || v instanceof Int32Array || v instanceof Uint8Array,
  "expected a Float32Array, Int32Array or Uint8Array",
);
const Shape = z.array(z.number().int().min(0));
const DType = z.enum(["float32", "int32", "bool"]);

export const ToDevice = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("init"),
    /** Int32Array(1) on a SharedArrayBuffer: the worker sets it to 1 and notifies after each answer. */
    signal: z.instanceof(SharedArrayBuffer),
    /** Where answers go (a MessagePort; checked by the worker, zod has no type for it). */
    reply: z.unknown(),
    /** Flags for `webgpu`'s create() (Dawn toggles), e.g. ["adapter=NVIDIA"]. */
    flags: z.array(z.string()),
  }),
  z.object({ type: z.literal("write"), id: z.number().int(), values: Values, shape: Shape, dtype: DType }),
  z.object({
    type: z.literal("kernel"),
    seq: z.number().int(),
    name: z.string(),
    /** Input name → tensor id (null for an absent optional input); a list for AddN, Concat, Pack. */
    inputs: z.union([z.array(z.number().int()), z.record(z.string(), z.number().int().nullable())]),
    attrs: z.record(z.string(), z.unknown()),
    /** Ids for the outputs, in order: first, first + 1, … */
    firstId: z.number().int(),
  }),
  z.object({ type: z.literal("read"), seq: z.number().int(), id: z.number().int() }),
  z.object({ type: z.literal("dispose"), id: z.number().int() }),
  /** Answered once every earlier message is handled and the GPU has finished the work they queued. */
  z.object({ type: z.literal("drain"), seq: z.number().int() }),
]);
export type ToDevice = z.infer<typeof ToDevice>;

/** What the worker learned about the device: the adapter and the limits that size a model. */
export const AdapterReport = z.object({
  vendor: z.string(),
  architecture: z.string(),
  device: z.string(),
  description: z.string(),
  isFallbackAdapter: z.boolean(),
  limits: z.record(z.string(), z.number()),
});
export type AdapterReport = z.infer<typeof AdapterReport>;

export const FromDevice = z.discriminatedUnion("type", [
  z.object({ type: z.literal("ready"), kernels: z.array(z.string()), adapter: AdapterReport }),
  z.object({ type: z.literal("unavailable"), reason: z.string() }),
  z.object({
    type: z.literal("outputs"),
    seq: z.number().int(),
    /** True when the kernel returned an array of tensors (even of one). */
    array: z.boolean(),
    outputs: z.array(z.object({ shape: Shape, dtype: DType })),
  }),
  z.object({ type: z.literal("values"), seq: z.number().int(), values: Values }),
  z.object({ type: z.literal("drained"), seq: z.number().int() }),
  z.object({ type: z.literal("failed"), seq: z.number().int(), message: z.string() }),
]);
export type FromDevice = z.infer<typeof FromDevice>;
