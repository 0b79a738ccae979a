import { createRequire } from "node:module";
import path from "node:path";
import * as tf from "@tensorflow/tfjs";
import { setWasmPaths } from "@tensorflow/tfjs-backend-wasm";
import { AgentRlError } from "../errors.ts";
import type { AdapterReport } from "./webgpu/protocol.ts";

/**
 * What the config may ask for; `auto` tries tfjs-node-gpu, tfjs-node, wasm, cpu in that order.
 * `webgpu` (Dawn through npm `webgpu`, on any Vulkan driver) is only ever loaded when named.
 */
export type BackendPreference = "auto" | "tensorflow" | "wasm" | "cpu" | "webgpu";

/** Every preference, for messages and for validating a name from the environment. */
export const BACKEND_PREFERENCES: readonly BackendPreference[] = ["auto", "tensorflow", "wasm", "cpu", "webgpu"];

/** The backend actually running, and why the ones before it were skipped. */
export interface BackendInfo {
  /** TF.js backend name as `tf.getBackend()` reports it (`tensorflow`, `wasm`, `cpu`). */
  readonly name: string;
  /** The package that provided it. */
  readonly source: string;
  /** One line per candidate that was tried and skipped. */
  readonly skipped: readonly string[];
  /** The WebGPU adapter (name, limits) when the backend is `webgpu`. */
  readonly adapter?: AdapterReport;
}

/** Raised when the requested backend cannot be started. */
export class BackendUnavailableError extends AgentRlError {
  override readonly name = "BackendUnavailableError";
}

let current: BackendInfo | undefined;

/** Native TensorFlow bindings register the `tensorflow` backend as a side effect of being imported. */
async function tryNative(pkg: string): Promise<string | undefined> {
  try {
    // A variable specifier keeps tsc and bundlers from resolving a package that is only in the GPU image.
    const specifier: string = pkg;
    await import(specifier);
  } catch (error) {
    return `${pkg}: not installed (${(error as Error).message.split("\n")[0]})`;
  }
  if (!(await tf.setBackend("tensorflow"))) return `${pkg}: imported but the tensorflow backend did not start`;
  return undefined;
}

async function tryWasm(): Promise<string | undefined> {
  try {
    // In Node the .wasm binaries are read from the package's dist folder, not fetched from a CDN.
    const require = createRequire(import.meta.url);
    const dist = path.join(path.dirname(require.resolve("@tensorflow/tfjs-backend-wasm/package.json")), "dist");
    setWasmPaths(`${dist}${path.sep}`);
    if (!(await tf.setBackend("wasm"))) return "wasm: backend did not start";
    return undefined;
  } catch (error) {
    return `wasm: ${(error as Error).message}`;
  }
}

/**
 * The `webgpu` backend: Dawn in a device thread behind a synchronous bridge (webgpu/bridge.ts),
 * imported only here so that no other backend choice loads Dawn.
 */
async function tryWebGpu(): Promise<{ reason?: string; adapter?: AdapterReport }> {
  try {
    const { registerWebGpuBridge } = await import("./webgpu/bridge.ts");
    const adapter = await registerWebGpuBridge();
    if (!(await tf.setBackend("webgpu"))) return { reason: "webgpu: backend did not start" };
    return { adapter };
  } catch (error) {
    return {
      reason: `webgpu: ${(error as Error).message} (needs a Vulkan driver: a GPU's, or Mesa's lavapipe from Debian bookworm-backports' mesa-vulkan-drivers)`,
    };
  }
}

/**
 * Selects and initialises the TF.js backend once per process; later calls return the same info
 * (the preference of the first call wins, since kernels and tensors are bound to it).
 * @example const { name } = await initBackend("auto"); // "wasm" on a CPU machine without tfjs-node
 */
export async function initBackend(preference: BackendPreference = "auto"): Promise<BackendInfo> {
  if (!BACKEND_PREFERENCES.includes(preference))
    throw new BackendUnavailableError(
      `backend "${String(preference)}" is not allowed (allowed: ${BACKEND_PREFERENCES.join(", ")})`,
    );
  if (current) return current;
  const skipped: string[] = [];
  if (preference === "webgpu") {
    const { reason, adapter } = await tryWebGpu();
    if (reason !== undefined) throw new BackendUnavailableError(`backend "webgpu" is not available: ${reason}`);
    await tf.ready();
    current = { name: tf.getBackend(), source: "@tensorflow/tfjs-backend-webgpu (Dawn)", skipped, adapter };
    return current;
  }
  const candidates: Array<{ source: string; start: () => Promise<string | undefined> }> = [];
  if (preference === "auto" || preference === "tensorflow") {
    candidates.push({ source: "@tensorflow/tfjs-node-gpu", start: () => tryNative("@tensorflow/tfjs-node-gpu") });
    candidates.push({ source: "@tensorflow/tfjs-node", start: () => tryNative("@tensorflow/tfjs-node") });
  }
  if (preference === "auto" || preference === "wasm") candidates.push({ source: "wasm", start: tryWasm });
  if (preference === "auto" || preference === "cpu") {
    candidates.push({
      source: "@tensorflow/tfjs (cpu)",
      start: async () => ((await tf.setBackend("cpu")) ? undefined : "cpu: backend did not start"),
    });
  }
  for (const candidate of candidates) {
    const reason = await candidate.start();
    if (reason === undefined) {
      await tf.ready();
      current = { name: tf.getBackend(), source: candidate.source, skipped };
      return current;
    }
    skipped.push(reason);
  }
  throw new BackendUnavailableError(
    `backend "${preference}" is not available: ${skipped.join("; ")} (allowed: ${BACKEND_PREFERENCES.join(", ")})`,
  );
}

/** The backend chosen by initBackend, or undefined before it ran. */
export function backendInfo(): BackendInfo | undefined {
  return current;
}
