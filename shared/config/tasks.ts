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
    // Env pool (functions/envpool/, `agentrl env pool`): how the task's workers are launched and recycled.
    minWorkers: z.number().int().min(0).default(1).describe("env pool: fewest workers kept running"),
    maxWorkers: z.number().int().min(1).default(4).describe("env pool: most workers run at once"),
    maxEpisodes: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe("env pool: a worker drains and is replaced after starting this many sessions (default unlimited)"),
    maxAgeSeconds: z
      .number()
      .int()
      .min(1)
      .optional()
      .describe("env pool: a worker drains and is replaced after this many seconds (default unlimited)"),
    warmWorkers: z
      .number()
      .int()
      .min(0)
      .default(0)
      .describe("env pool: idle ready workers kept beyond demand, hiding start latency"),
    exclusive: z
      .boolean()
      .default(false)
      .describe("env pool: each episode gets a fresh worker of its own (concurrency 1, retired after it)"),
  })
  .strict()
  .superRefine((entry, ctx) => {
    if (entry.minWorkers > entry.maxWorkers)
      ctx.addIssue({
        code: "custom",
        path: ["minWorkers"],
        message: `${entry.minWorkers} exceeds maxWorkers (${entry.maxWorkers})`,
      });
    if (entry.warmWorkers > entry.maxWorkers)
      ctx.addIssue({
        code: "custom",
        path: ["warmWorkers"],
        message: `${entry.warmWorkers} exceeds maxWorkers (${entry.maxWorkers})`,
      });
  });

export const TasksConfig = z
  .object({
    mix: z
      .array(TaskMixEntry)
      .min(1)
      .default(TASK_NAMES.map((name) => TaskMixEntry.parse({ name })))
      .describe("tasks trained together and their shares (default: all five, equal weights)"),
    controllerPort: z.number().int().min(1).max(65_535).default(5020).describe("controller port"),
    agentbench: z
      .object({
        dir: z
          .string()
          .min(1)
          .optional()
          .describe(
            "AgentBench data folder (its layout: data/dbbench/..., data/os_interaction/...) for the dbbench-*/os-* tasks; AGENTRL_AGENTBENCH_DIR wins; default .agentrl/agentbench when present",
          ),
      })
      .strict()
      .prefault({})
      .describe("AgentBench's published task data (`agentrl data fetch agentbench`)"),
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
