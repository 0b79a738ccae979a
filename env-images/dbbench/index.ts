import type { TaskModule } from "../../shared/env/task.ts";
import { dbbenchExpert, dbbenchRandom } from "./agents.ts";
import { createDbbenchTask, type DbbenchTaskName } from "./task.ts";

function moduleOf(name: DbbenchTaskName): TaskModule {
  return { task: createDbbenchTask(name), expert: dbbenchExpert(name), random: dbbenchRandom(name) };
}

/** AgentBench FC's DBBench test set (300 instances), as registered in env-images/registry.ts. */
export const stdModule: TaskModule = moduleOf("dbbench-std");
/** AgentBench FC's DBBench dev set (60 instances). */
export const devModule: TaskModule = moduleOf("dbbench-dev");
/** Generated instances in DBBench's format and dialect, for RL (evaluate on dbbench-std). */
export const synthModule: TaskModule = moduleOf("dbbench-synth");
