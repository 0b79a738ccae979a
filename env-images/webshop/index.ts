import type { TaskModule } from "../../shared/env/task.ts";
import { webshopExpert, webshopRandom } from "./agents.ts";
import { createWebShopTask } from "./task.ts";

/** The WebShop task as registered in env-images/registry.ts. */
export const taskModule: TaskModule = { task: createWebShopTask(), expert: webshopExpert, random: webshopRandom };
