import type { TaskModule } from "../../shared/env/task.ts";
import { dbbenchExpert, dbbenchRandom } from "./agents.ts";
import type { DbbenchSplit } from "./instances.ts";
import { createDbbenchTask } from "./task.ts";

function moduleOf(split: DbbenchSplit): TaskModule {
  return { task: createDbbenchTask(split), expert: dbbenchExpert(split), random: dbbenchRandom(split) };
}

/** AgentBench FC's DBBench test set (300 instances), as registered in env-images/registry.ts. */
export const stdModule: TaskModule = moduleOf("dbbench-std");
/** AgentBench FC's DBBench dev set (60 instances). */
export const devModule: TaskModule = moduleOf("dbbench-dev");
