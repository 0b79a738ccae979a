import type { TaskModule } from "../../shared/env/task.ts";
import { osExpert, osRandom } from "./agents.ts";
import type { OsSplit } from "./instances.ts";
import { createOsTask } from "./task.ts";

function moduleOf(name: OsSplit): TaskModule {
  return { task: createOsTask(name), expert: osExpert(name), random: osRandom(name) };
}

/** AgentBench FC's OS interaction test set (144 instances), in containers. */
export const stdModule: TaskModule = moduleOf("os-std");
/** AgentBench's OS interaction dev set (26 instances). */
export const devModule: TaskModule = moduleOf("os-dev");
/** AgentBench FC's OS interaction training set (1000 instances, scripts from scripts/7). */
export const envTrainModule: TaskModule = moduleOf("os-env_train");
