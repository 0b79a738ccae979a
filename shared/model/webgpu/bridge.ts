import { MessageChannel, type MessagePort, receiveMessageOnPort, Worker } from "node:worker_threads";
import * as tf from "@tensorflow/tfjs";
import { AgentRlError } from "../../errors.ts";
import { type AdapterReport, FromDevice, type ToDevice } from "./protocol.ts";

/**
 * The `webgpu` backend of the main thread: TF.js's own webgpu backend, run in a thread of its own.
 *
 * Why a thread: in Node, Dawn (npm `webgpu`) maps buffers only as its event loop turns, and
 * TF.js's webgpu `readSync` needs a browser's OffscreenCanvas, so `dataSync()` — which the model,
 * the trainer and the decoder use — cannot work on the thread that owns the device. Here every
 * kernel of the main thread's TF.js is forwarded, in order, to the device thread; a read blocks on
 * a shared flag while that thread awaits the GPU, then takes the values synchronously from the
 * reply port. Gradients, tidy and variables stay in the main thread's TF.js as for any backend.
 *
 * Costs: one thread hop per kernel (its output shapes come back) and per read; writes and
 * disposals are posted without waiting.
 */

/** Raised when the device thread answers a request with an error, or stops answering. */
export class WebGpuBridgeError extends AgentRlError {
  override readonly name = "WebGpuBridgeError";
}

/** How long one answer may take before the device thread is given up on (a lost device, a hang). */
const ANSWER_TIMEOUT_MS = 10 * 60 * 1000;
/** How long disposing (or the process exiting) waits for the device thread to finish its queue. */
const DRAIN_TIMEOUT_MS = 30 * 1000;

interface Data {
  readonly id: number;
  refCount: number;
  readonly dtype: tf.DataType;
}

export class WebGpuBridgeBackend extends tf.KernelBackend {
  private readonly data = new WeakMap<object, Data>();
  private live = 0;
  private nextId = 1;
  private nextSeq = 1;
  private readonly signal: Int32Array;
  private disposed = false;
  /** Set when the device thread has ended (a crash, or terminate()): nothing is left to drain. */
  private threadEnded = false;

  constructor(
    private readonly worker: Worker,
    private readonly replies: MessagePort,
    signal: SharedArrayBuffer,
    readonly adapter: AdapterReport,
  ) {
    super();
    this.signal = new Int32Array(signal);
    worker.once("exit", () => {
      this.threadEnded = true;
    });
  }

  private post(message: ToDevice): void {
    if (this.disposed) throw new WebGpuBridgeError("the webgpu backend was disposed");
    this.worker.postMessage(message);
  }

  /** Posts a request and blocks until its answer (the device thread notifies `signal` after posting it). */
  private call(message: Extract<ToDevice, { seq: number }>, timeoutMs = ANSWER_TIMEOUT_MS): FromDevice {
    Atomics.store(this.signal, 0, 0);
    this.post(message);
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const received = receiveMessageOnPort(this.replies);
      if (received) {
        const answer = FromDevice.parse(received.message);
        if ("seq" in answer && answer.seq === message.seq) {
          if (answer.type === "failed") throw new WebGpuBridgeError(`webgpu ${message.type}: ${answer.message}`);
          return answer;
        }
        continue;
      }
      if (Date.now() > deadline)
        throw new WebGpuBridgeError(`webgpu ${message.type}: no answer from the device thread in ${timeoutMs} ms`);
      Atomics.wait(this.signal, 0, 0, 1000);
      Atomics.store(this.signal, 0, 0);
    }
  }

  private track(dtype: tf.DataType, id = this.nextId++): object {
    const dataId = { id };
    this.data.set(dataId, { id, refCount: 1, dtype });
    this.live += 1;
    return dataId;
  }

  private entry(dataId: object): Data {
    let d = this.data.get(dataId);
    // A tensor another backend holds (made before a setBackend) moves here, as DataStorage does it.
    if (!d && tf.engine().state.tensorInfo.has(dataId)) {
      tf.engine().moveData(this, dataId);
      d = this.data.get(dataId);
    }
    if (!d) throw new WebGpuBridgeError("tensor data is not on the webgpu backend (disposed?)");
    return d;
  }

  /** Forwards one kernel; its outputs get fresh ids, their shapes come back from the device thread. */
  runKernel(
    name: string,
    inputs: tf.NamedTensorInfoMap,
    attrs: tf.NamedAttrMap | undefined,
  ): tf.TensorInfo | tf.TensorInfo[] {
    // Most kernels name their inputs; AddN, Concat and Pack take a list.
    let ids: number[] | Record<string, number | null>;
    if (Array.isArray(inputs)) ids = (inputs as tf.TensorInfo[]).map((info) => this.entry(info.dataId).id);
    else {
      ids = {};
      for (const [key, info] of Object.entries(inputs)) ids[key] = info ? this.entry(info.dataId).id : null;
    }
    const seq = this.nextSeq++;
    const firstId = this.nextId;
    const answer = this.call({ type: "kernel", seq, name, inputs: ids, attrs: { ...attrs }, firstId });
    if (answer.type !== "outputs") throw new WebGpuBridgeError(`webgpu kernel ${name}: unexpected ${answer.type}`);
    this.nextId = firstId + answer.outputs.length;
    const outs = answer.outputs.map((o, i) => ({
      dataId: this.track(o.dtype, firstId + i),
      shape: o.shape,
      dtype: o.dtype,
    }));
    return answer.array ? outs : (outs[0] as tf.TensorInfo);
  }

  override write(values: tf.BackendValues, shape: number[], dtype: tf.DataType): object {
    const dataId = this.track(dtype);
    this.post({
      type: "write",
      id: this.entry(dataId).id,
      values: ownCopy(values, dtype),
      shape,
      dtype: dtypeOf(dtype),
    });
    return dataId;
  }

  override move(dataId: object, values: tf.BackendValues, shape: number[], dtype: tf.DataType, refCount: number): void {
    const id = this.nextId++;
    this.data.set(dataId, { id, refCount, dtype });
    this.live += 1;
    this.post({ type: "write", id, values: ownCopy(values, dtype), shape, dtype: dtypeOf(dtype) });
  }

  override readSync(dataId: object): tf.BackendValues {
    return this.fetch(dataId);
  }

  /** Blocks too: the device thread answers reads in order with the kernels before them. */
  override read(dataId: object): Promise<tf.BackendValues> {
    return Promise.resolve(this.fetch(dataId));
  }

  private fetch(dataId: object): tf.BackendValues {
    const seq = this.nextSeq++;
    const answer = this.call({ type: "read", seq, id: this.entry(dataId).id });
    if (answer.type !== "values") throw new WebGpuBridgeError(`webgpu read: unexpected ${answer.type}`);
    return answer.values;
  }

  override disposeData(dataId: object, force = false): boolean {
    const d = this.data.get(dataId);
    if (!d) return true;
    d.refCount -= 1;
    if (!force && d.refCount > 0) return false;
    this.data.delete(dataId);
    this.live -= 1;
    if (!this.disposed) this.post({ type: "dispose", id: d.id });
    return true;
  }

  override refCount(dataId: object): number {
    return this.data.get(dataId)?.refCount ?? 0;
  }

  override incRef(dataId: object): void {
    this.entry(dataId).refCount += 1;
  }

  override numDataIds(): number {
    return this.live;
  }

  override memory(): { unreliable: boolean; reasons?: string[] } {
    return { unreliable: true, reasons: ["the device thread's memory is not counted here"] };
  }

  override floatPrecision(): 32 {
    return 32;
  }

  override epsilon(): number {
    return 1e-7;
  }

  override timerAvailable(): boolean {
    return false;
  }

  /** True once dispose() has drained and ended the device thread. */
  get isDisposed(): boolean {
    return this.disposed;
  }

  /**
   * Blocks until the device thread has handled every message posted so far and the GPU has
   * finished their work. Ending the thread before that can abort the process: Dawn raises a fatal
   * error when its thread is terminated while it releases a buffer.
   */
  drain(timeoutMs = DRAIN_TIMEOUT_MS): void {
    const answer = this.call({ type: "drain", seq: this.nextSeq++ }, timeoutMs);
    if (answer.type !== "drained") throw new WebGpuBridgeError(`webgpu drain: unexpected ${answer.type}`);
  }

  /** Drains the device thread, then ends it. Also runs as the process exits (registerWebGpuBridge). */
  override dispose(): void {
    if (this.disposed) return;
    try {
      if (!this.threadEnded) this.drain();
    } finally {
      this.disposed = true;
      this.replies.close();
      void this.worker.terminate();
    }
  }
}

function dtypeOf(dtype: tf.DataType): "float32" | "int32" | "bool" {
  if (dtype === "float32" || dtype === "int32" || dtype === "bool") return dtype;
  throw new WebGpuBridgeError(`webgpu: ${dtype} tensors are not supported (allowed: float32, int32, bool)`);
}

/** A copy the caller cannot change afterwards (TF.js owns values it was given; callers reuse buffers). */
function ownCopy(values: tf.BackendValues, dtype: tf.DataType): Float32Array | Int32Array | Uint8Array {
  if (values instanceof Float32Array || values instanceof Int32Array || values instanceof Uint8Array)
    return values.slice();
  throw new WebGpuBridgeError(`webgpu: values of a ${dtype} tensor must be a Float32Array, Int32Array or Uint8Array`);
}

const WORKER_ENTRY = new URL("./worker.mjs", import.meta.url);

/**
 * Starts the device thread and registers the `webgpu` backend with a forwarding kernel for every
 * kernel TF.js's webgpu backend has. Resolves to the adapter it found, or rejects saying why not.
 * @example const adapter = await registerWebGpuBridge(); await tf.setBackend("webgpu");
 */
export async function registerWebGpuBridge(flags: readonly string[] = []): Promise<AdapterReport> {
  const worker = new Worker(WORKER_ENTRY, { execArgv: [] });
  const channel = new MessageChannel();
  const signal = new SharedArrayBuffer(4);
  const ready = await new Promise<FromDevice>((resolve, reject) => {
    worker.once("error", reject);
    worker.once("exit", (code) => reject(new WebGpuBridgeError(`the webgpu device thread exited (code ${code})`)));
    worker.once("message", (raw: unknown) => {
      const parsed = FromDevice.safeParse(raw);
      if (parsed.success) resolve(parsed.data);
      else reject(new WebGpuBridgeError(`webgpu device thread: ${parsed.error.message}`));
    });
    worker.postMessage({ type: "init", signal, reply: channel.port2, flags: [...flags] } satisfies ToDevice, [
      channel.port2,
    ]);
  }).catch(async (error: unknown) => {
    await worker.terminate();
    throw error;
  });
  worker.removeAllListeners("error");
  worker.removeAllListeners("exit");
  if (ready.type !== "ready") {
    await worker.terminate();
    throw new WebGpuBridgeError(ready.type === "unavailable" ? ready.reason : `unexpected ${ready.type}`);
  }
  // The device thread must not keep a finished program alive; but a program that ends (or calls
  // process.exit) with disposals still queued lets the thread finish them first.
  worker.unref();
  const bridge = new WebGpuBridgeBackend(worker, channel.port1, signal, ready.adapter);
  process.once("exit", () => {
    try {
      bridge.dispose();
    } catch (error) {
      process.stderr.write(`webgpu: the device thread did not finish its queue before exit: ${String(error)}\n`);
    }
  });
  tf.registerBackend("webgpu", () => bridge);
  for (const kernelName of ready.kernels)
    tf.registerKernel({
      kernelName,
      backendName: "webgpu",
      kernelFunc: ({ inputs, attrs }) => bridge.runKernel(kernelName, inputs, attrs),
    });
  return ready.adapter;
}
