import type { TaskModule } from "../../shared/env/task.ts";
import { dbExpert, dbRandom } from "./agents.ts";
import { createDbTask } from "./task.ts";

/** The DB task as registered in env-images/registry.ts. */
export const taskModule: TaskModule = { task: createDbTask(), expert: dbExpert, random: dbRandom };
