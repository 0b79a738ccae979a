import type { TaskModule } from "../../shared/env/task.ts";
import { kgExpert, kgRandom } from "./agents.ts";
import { createKgTask } from "./task.ts";

/** The KG task as registered in env-images/registry.ts. */
export const taskModule: TaskModule = { task: createKgTask(), expert: kgExpert, random: kgRandom };
