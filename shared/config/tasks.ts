import { z } from "zod";

export const TASK_NAMES = ["alfworld", "db", "kg", "os", "webshop"] as const;
export const TaskName = z.enum(TASK_NAMES);
export type TaskName = z.infer<typeof TaskName>;

export const TaskMixEntry = z
  .object({
    name: z.string().min(1).describe("task name served by an env worker"),
    weight: z.number().positive().default(1).describe("share of rollout requests"),
    /** Train instances drawn from; smaller sets are replicated up to the largest (reference section 4). */
    trainInstances: z.number().int().min(1).default(10_000).describe("train indices used"),
    concurrency: z.number().int().min(1).default(16).describe("sessions per env worker"),
  })
  .strict();

export const TasksConfig = z
  .object({
    mix: z
      .array(TaskMixEntry)
      .min(1)
      .default(TASK_NAMES.map((name) => TaskMixEntry.parse({ name })))
      .describe("tasks trained together and their shares (default: all five, equal weights)"),
    controllerPort: z.number().int().min(1).max(65_535).default(5020).describe("controller port"),
    /** Use an already running controller instead of starting one. */
    controllerUrl: z.string().url().optional().describe("external controller URL"),
  })
  .strict()
  .superRefine((t, ctx) => {
    const seen = new Set<string>();
    t.mix.forEach((entry, i) => {
      if (seen.has(entry.name))
        ctx.addIssue({ code: "custom", path: ["mix", i, "name"], message: `task "${entry.name}" listed twice` });
      seen.add(entry.name);
    });
  });
export type TasksConfig = z.infer<typeof TasksConfig>;
