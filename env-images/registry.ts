import type { TaskModule } from "../shared/env/task.ts";

/**
 * Every task this build can serve, loaded lazily so that a worker loads only its own task.
 * Add one line per task: `name: () => import("./name/index.ts").then((m) => m.taskModule),`
 */
export const TASK_MODULES: Readonly<Record<string, () => Promise<TaskModule>>> = {
  example: () => import("./example/index.ts").then((m) => m.taskModule),
  alfworld: () => import("./alfworld/index.ts").then((m) => m.taskModule),
  db: () => import("./db/index.ts").then((m) => m.taskModule),
  "dbbench-std": () => import("./dbbench/index.ts").then((m) => m.stdModule),
  "dbbench-dev": () => import("./dbbench/index.ts").then((m) => m.devModule),
  "dbbench-synth": () => import("./dbbench/index.ts").then((m) => m.synthModule),
  os: () => import("./os/index.ts").then((m) => m.taskModule),
  "os-std": () => import("./osbench/index.ts").then((m) => m.stdModule),
  "os-dev": () => import("./osbench/index.ts").then((m) => m.devModule),
  "os-env_train": () => import("./osbench/index.ts").then((m) => m.envTrainModule),
  kg: () => import("./kg/index.ts").then((m) => m.taskModule),
  webshop: () => import("./webshop/index.ts").then((m) => m.taskModule),
  latency: () => import("./latency/index.ts").then((m) => m.taskModule),
};

export async function loadTaskModule(name: string): Promise<TaskModule> {
  const load = TASK_MODULES[name];
  if (!load) throw new Error(`unknown task "${name}"; available: ${Object.keys(TASK_MODULES).join(", ") || "none"}`);
  return load();
}
