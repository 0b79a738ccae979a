import type { TaskModule } from "../../shared/env/task.ts";
import { alfworldExpert, alfworldRandom } from "./agents.ts";
import { alfworldTask } from "./task.ts";

/** The alfworld task as the registry and `env serve alfworld` load it. */
export const taskModule: TaskModule = { task: alfworldTask, expert: alfworldExpert, random: alfworldRandom };
