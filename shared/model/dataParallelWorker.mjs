// Entry of a data-parallel replica thread (shared/model/dataParallel.ts): module loader hooks are
// per thread, so this registers the TypeScript loader here, then loads the replica.
import { register } from "tsx/esm/api";

register();
await import("./dataParallelWorker.ts");
