/**
 * The thread that owns the WebGPU device (started by bridge.ts). It runs TF.js's own `webgpu`
 * backend (@tensorflow/tfjs-backend-webgpu on Dawn, npm `webgpu`) and executes, in order, the
 * writes, kernels, reads and disposals the main thread sends. Reads are awaited here (Dawn maps
 * buffers asynchronously); the main thread blocks on `signal` until the values are posted.
 */
import { type MessagePort, parentPort } from "node:worker_threads";
import type * as tf from "@tensorflow/tfjs";
import { type AdapterReport, type FromDevice, ToDevice } from "./protocol.ts";

const control = parentPort;
if (!control) throw new Error("webgpu/worker.ts runs as a worker thread (started by bridge.ts)");

type TensorInfo = { dataId: object; shape: number[]; dtype: tf.DataType };

let tfjs: typeof tf | undefined;
let backend: tf.KernelBackend | undefined;
let device: GPUDevice | undefined;
let reply: MessagePort | undefined;
let signal: Int32Array | undefined;
/** Main-thread id → this backend's tensor. */
const tensors = new Map<number, TensorInfo>();
/** Inputs one shader may bind besides its output (AddN binds them all; Concat splits itself). */
let maxInputs = 7;
/** A write or dispose that failed (they get no answer): reported with the next answer. */
let deferredError: string | undefined;

function messageOf(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

function answer(message: FromDevice): void {
  const pending = deferredError;
  deferredError = undefined;
  const sent: FromDevice =
    pending && message.type !== "failed" && "seq" in message
      ? { type: "failed", seq: message.seq, message: `an earlier write or dispose failed: ${pending}` }
      : message;
  reply?.postMessage(sent);
  if (signal) {
    Atomics.store(signal, 0, 1);
    Atomics.notify(signal, 0);
  }
}

function tensor(id: number | null | undefined): TensorInfo {
  const t = id === null || id === undefined ? undefined : tensors.get(id);
  if (!t) throw new Error(`tensor ${id} is not on the device (disposed or never written)`);
  return t;
}

async function start(message: Extract<ToDevice, { type: "init" }>): Promise<void> {
  signal = new Int32Array(message.signal);
  reply = message.reply as MessagePort;
  const { create, globals } = await import("webgpu");
  Object.assign(globalThis, globals);
  const gpu = create(message.flags);
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" });
  if (!adapter) {
    control?.postMessage({ type: "unavailable", reason: "no WebGPU adapter (no Vulkan driver that Dawn accepts)" });
    return;
  }
  // TF.js's webgpu backend finds the device through navigator.gpu, as in a browser.
  Object.defineProperty(globalThis, "navigator", { value: { gpu }, configurable: true, writable: true });
  tfjs = await import("@tensorflow/tfjs");
  await import("@tensorflow/tfjs-backend-webgpu");
  if (!(await tfjs.setBackend("webgpu"))) {
    control?.postMessage({ type: "unavailable", reason: "the TF.js webgpu backend did not start on this adapter" });
    return;
  }
  backend = tfjs.backend();
  // A WebGPU validation error is not thrown: the pipeline is skipped and its output left as it
  // was. Catch every one, so that the next answer fails instead of returning wrong numbers.
  device = (backend as unknown as { device: GPUDevice }).device;
  device.addEventListener("uncapturederror", (event) => {
    deferredError ??= `WebGPU: ${(event as GPUUncapturedErrorEvent).error.message}`;
  });
  maxInputs = device.limits.maxStorageBuffersPerShaderStage - 1;
  const limits: Record<string, number> = {};
  for (const key in adapter.limits) {
    const value = (adapter.limits as unknown as Record<string, unknown>)[key];
    if (typeof value === "number") limits[key] = value;
  }
  const info = adapter.info;
  const report: AdapterReport = {
    vendor: info.vendor,
    architecture: info.architecture,
    device: info.device,
    description: info.description,
    isFallbackAdapter: (info as { isFallbackAdapter?: boolean }).isFallbackAdapter ?? false,
    limits,
  };
  const kernels = tfjs.getKernelsForBackend("webgpu").map((k) => k.kernelName);
  control?.postMessage({ type: "ready", kernels, adapter: report } satisfies FromDevice);
}

function runKernel(message: Extract<ToDevice, { type: "kernel" }>): FromDevice {
  const lib = tfjs as typeof tf;
  const config = lib.getKernel(message.name, "webgpu");
  if (!config) throw new Error(`kernel ${message.name} is not registered for webgpu`);
  let inputs: Record<string, TensorInfo> | TensorInfo[];
  if (Array.isArray(message.inputs)) inputs = message.inputs.map(tensor);
  else {
    inputs = {};
    for (const [name, id] of Object.entries(message.inputs)) if (id !== null) inputs[name] = tensor(id);
  }
  const out =
    message.name === "AddN" && Array.isArray(inputs) && inputs.length > maxInputs
      ? addNInChunks(config.kernelFunc, inputs)
      : (config.kernelFunc({
          inputs: inputs as tf.NamedTensorInfoMap,
          attrs: message.attrs as tf.NamedAttrMap,
          backend: backend as tf.KernelBackend,
        }) as TensorInfo | TensorInfo[]);
  const outs = Array.isArray(out) ? out : [out];
  outs.forEach((t, i) => {
    tensors.set(message.firstId + i, t);
  });
  return {
    type: "outputs",
    seq: message.seq,
    array: Array.isArray(out),
    outputs: outs.map((t) => ({ shape: t.shape, dtype: t.dtype as "float32" | "int32" | "bool" })),
  };
}

/**
 * AddN over more inputs than a shader may bind (TF.js's webgpu AddN binds every input at once and
 * the device's default limit is 8 storage buffers): partial sums of at most `maxInputs` inputs.
 */
function addNInChunks(kernelFunc: tf.KernelFunc, inputs: TensorInfo[]): TensorInfo {
  let pending = inputs;
  const partials: TensorInfo[] = [];
  while (pending.length > 1) {
    const next: TensorInfo[] = [];
    for (let i = 0; i < pending.length; i += maxInputs) {
      const chunk = pending.slice(i, i + maxInputs);
      const sum =
        chunk.length === 1
          ? (chunk[0] as TensorInfo)
          : (kernelFunc({
              inputs: chunk as unknown as tf.NamedTensorInfoMap,
              backend: backend as tf.KernelBackend,
              attrs: {},
            }) as TensorInfo);
      if (chunk.length > 1) partials.push(sum);
      next.push(sum);
    }
    pending = next;
  }
  const result = pending[0] as TensorInfo;
  for (const t of partials) if (t !== result) (backend as tf.KernelBackend).disposeData(t.dataId);
  return result;
}

async function handle(message: ToDevice): Promise<void> {
  switch (message.type) {
    case "init":
      try {
        await start(message);
      } catch (error) {
        control?.postMessage({ type: "unavailable", reason: messageOf(error) } satisfies FromDevice);
      }
      return;
    case "write":
      try {
        const dataId = (backend as tf.KernelBackend).write(message.values, message.shape, message.dtype);
        tensors.set(message.id, { dataId, shape: message.shape, dtype: message.dtype });
      } catch (error) {
        deferredError ??= messageOf(error);
      }
      return;
    case "dispose": {
      const t = tensors.get(message.id);
      tensors.delete(message.id);
      try {
        // A kernel output may share its input's data (reshape): the backend counts references.
        if (t) (backend as tf.KernelBackend).disposeData(t.dataId);
      } catch (error) {
        deferredError ??= messageOf(error);
      }
      return;
    }
    case "drain":
      // The main thread waits for this before it ends the thread: terminating it while Dawn
      // releases a buffer aborts the whole process (a fatal napi_throw).
      try {
        await device?.queue.onSubmittedWorkDone();
        answer({ type: "drained", seq: message.seq });
      } catch (error) {
        answer({ type: "failed", seq: message.seq, message: messageOf(error) });
      }
      return;
    case "kernel":
      try {
        answer(runKernel(message));
      } catch (error) {
        answer({ type: "failed", seq: message.seq, message: messageOf(error) });
      }
      return;
    case "read":
      try {
        const values = await (backend as tf.KernelBackend).read(tensor(message.id).dataId);
        answer({ type: "values", seq: message.seq, values: copyOf(values) });
      } catch (error) {
        answer({ type: "failed", seq: message.seq, message: messageOf(error) });
      }
      return;
  }
}

/** A fresh array of its own (a read may return the backend's cached buffer, which must stay). */
function copyOf(values: tf.BackendValues): Float32Array | Int32Array | Uint8Array {
  if (values instanceof Float32Array) return values.slice();
  if (values instanceof Int32Array) return values.slice();
  if (values instanceof Uint8Array) return values.slice();
  throw new Error("string tensors are not supported on the webgpu bridge");
}

// One message at a time, in arrival order: a read's await must not let a later kernel overtake it.
let queue: Promise<void> = Promise.resolve();
control.on("message", (raw: unknown) => {
  const parsed = ToDevice.safeParse(raw);
  if (!parsed.success) {
    deferredError ??= `bad message: ${parsed.error.message}`;
    return;
  }
  // A handler that throws must not stall the messages after it (a rejected chain skips them).
  queue = queue
    .then(() => handle(parsed.data))
    .catch((error: unknown) => {
      deferredError ??= messageOf(error);
    });
});
