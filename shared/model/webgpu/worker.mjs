// Entry of the WebGPU device thread (shared/model/webgpu/bridge.ts): module loader hooks are per
// thread, so this registers the TypeScript loader here, then loads the worker.
import { register } from "tsx/esm/api";

register();
await import("./worker.ts");
