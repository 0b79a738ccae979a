import type { TaskModule } from "../../shared/env/task.ts";
import { osExpert, osRandom } from "./agents.ts";
import { createOsTask } from "./task.ts";

/** The os task as the registry and `env serve os` load it (30 s command cap). */
export const taskModule: TaskModule = { task: createOsTask(), expert: osExpert, random: osRandom };
