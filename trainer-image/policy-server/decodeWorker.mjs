// Worker entry of ThreadedScheduler: module loader hooks are per thread, so this registers the
// TypeScript loader here (as bin/agentrl.mjs does in the main thread), then loads the worker.
import { register } from "tsx/esm/api";

register();
await import("./decodeWorker.ts");
