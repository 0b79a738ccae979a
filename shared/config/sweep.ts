import { readFile } from "node:fs/promises";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { issuesOf, ValidationError } from "../errors.ts";
import { type ExperimentConfig, parseConfig } from "./index.ts";
import { assertSafeConfigTree, FORBIDDEN_CONFIG_KEYS } from "./safePath.ts";
import { setConfigPath } from "./setPath.ts";

/** A config field path as users write it: `trainer.learningRate`, `tasks.mix.0.weight`. */
const FieldPath = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$/, "must be a dotted config path such as trainer.learningRate")
  .refine((path) => path !== "experimentId", "experimentId is set per grid point (<sweep name>-<index>)")
  .refine(
    (path) => !path.split(".").some((segment) => FORBIDDEN_CONFIG_KEYS.has(segment)),
    "__proto__, constructor and prototype are not allowed (prototype pollution)",
  );

/** EventBridge Scheduler expressions: `rate(7 days)`, `cron(0 3 ? * MON *)`, `at(2027-01-01T00:00:00)`. */
export const ScheduleExpression = z
  .string()
  .regex(
    /^(rate\(\d+ (minute|minutes|hour|hours|day|days)\)|cron\(\S+( \S+){5}\)|at\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\))$/,
    "must be rate(N unit), cron(6 fields) or at(yyyy-mm-ddThh:mm:ss)",
  );

/** Most grid points one sweep may expand to (a guard against a typo multiplying runs). */
export const MAX_GRID_POINTS = 256;

/**
 * A sweep: a base experiment config and a grid over config fields; every combination of grid
 * values is one experiment. `schedule` is used when the sweep is deployed (EventBridge Scheduler).
 * @example { name: "lr", base: { trainer: { maxSteps: 5 } }, grid: { "trainer.learningRate": [1e-4, 3e-4] } }
 */
export const SweepSpec = z
  .object({
    name: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]{0,39}$/, "lowercase letters, digits and '-', at most 40 characters")
      .describe("sweep name; grid point i runs as experiment <name>-<i>"),
    description: z.string().optional(),
    schedule: ScheduleExpression.optional().describe("when the deployed sweep runs (EventBridge Scheduler)"),
    /** Timezone of cron() schedules. */
    timezone: z.string().default("UTC"),
    base: z.record(z.string(), z.unknown()).default({}).describe("experiment config shared by every point"),
    grid: z
      .record(z.string(), z.array(z.unknown()).min(1, "needs at least one value"))
      .superRefine((grid, ctx) => {
        const paths = Object.keys(grid);
        if (paths.length === 0) ctx.addIssue({ code: "custom", message: "needs at least one field" });
        for (const path of paths) {
          const checked = FieldPath.safeParse(path);
          if (!checked.success)
            ctx.addIssue({ code: "custom", path: [path], message: checked.error.issues[0]?.message ?? "bad path" });
        }
      })
      .describe("config field path -> values to try"),
  })
  .strict();
export type SweepSpec = z.infer<typeof SweepSpec>;
export type SweepSpecInput = z.input<typeof SweepSpec>;

/** One experiment of a sweep. */
export interface GridPoint {
  /** Position in the expansion order (0-based). */
  readonly index: number;
  /** `<sweep name>-<index>`, also the point's experimentId. */
  readonly id: string;
  /** The grid values of this point, keyed by field path, in grid order. */
  readonly assignments: Readonly<Record<string, unknown>>;
  readonly config: ExperimentConfig;
}

/** Validates a raw sweep spec, throwing a ValidationError naming each failing field. */
export function parseSweepSpec(raw: unknown): SweepSpec {
  assertSafeConfigTree(raw, "sweep spec");
  const result = SweepSpec.safeParse(raw);
  if (!result.success) throw new ValidationError("sweep spec", issuesOf(result.error));
  return result.data;
}

/** Reads a sweep spec from a YAML or JSON file. */
export async function loadSweepSpec(file: string): Promise<SweepSpec> {
  const text = await readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
    throw new ValidationError("sweep spec", [
      { path: "", message: `cannot read ${file}: ${error.code ?? error.message}` },
    ]);
  });
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (error) {
    throw new ValidationError("sweep spec", [
      { path: "", message: `${file} is not valid YAML/JSON: ${(error as Error).message}` },
    ]);
  }
  return parseSweepSpec(raw);
}

/**
 * Expands the grid into experiments: the Cartesian product of the grid values, in the order the
 * fields are written, the last field varying fastest. Deterministic for a given spec. Each point
 * is validated with parseConfig; the first invalid point throws naming the point and the field.
 */
export function expandGrid(spec: SweepSpec): GridPoint[] {
  const fields = Object.entries(spec.grid);
  const total = fields.reduce((n, [, values]) => n * values.length, 1);
  if (total > MAX_GRID_POINTS)
    throw new ValidationError("sweep grid", [
      { path: "grid", message: `expands to ${total} experiments; at most ${MAX_GRID_POINTS} are allowed` },
    ]);
  const points: GridPoint[] = [];
  for (let index = 0; index < total; index++) {
    const assignments: Record<string, unknown> = {};
    let rest = index;
    for (let f = fields.length - 1; f >= 0; f--) {
      const [path, values] = fields[f] as [string, unknown[]];
      assignments[path] = values[rest % values.length];
      rest = Math.floor(rest / values.length);
    }
    const ordered = Object.fromEntries(fields.map(([path]) => [path, assignments[path]]));
    const id = `${spec.name}-${index}`;
    const raw = structuredClone(spec.base) as Record<string, unknown>;
    for (const [path, value] of Object.entries(ordered)) setConfigPath(raw, path, structuredClone(value), "sweep grid");
    raw.experimentId = id;
    let config: ExperimentConfig;
    try {
      config = parseConfig(raw);
    } catch (error) {
      if (error instanceof ValidationError)
        throw new ValidationError(`sweep grid point ${index} (${describeAssignments(ordered)})`, error.issues);
      throw error;
    }
    points.push({ index, id, assignments: ordered, config });
  }
  return points;
}

/** `trainer.learningRate=0.0001, rollout.groupSize=4` */
export function describeAssignments(assignments: Readonly<Record<string, unknown>>): string {
  return Object.entries(assignments)
    .map(([path, value]) => `${path}=${JSON.stringify(value)}`)
    .join(", ");
}
