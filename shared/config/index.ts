import { readFile } from "node:fs/promises";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { issuesOf, ValidationError } from "../errors.ts";
import { engineIdOf } from "../policy/engine-sync.ts";
import { EvaluationConfig } from "./evaluation.ts";
import { GatewayConfig } from "./gateway.ts";
import { LimitsConfig } from "./limits.ts";
import { PolicyConfig } from "./policy.ts";
import { RolloutConfig } from "./rollout.ts";
import { assertSafeConfigTree } from "./safePath.ts";
import { setConfigPath } from "./setPath.ts";
import { TasksConfig } from "./tasks.ts";
import { TrackingConfig } from "./tracking.ts";
import { TrainerConfig } from "./trainer.ts";
import { TransportConfig } from "./transport.ts";

export * from "./evaluation.ts";
export * from "./gateway.ts";
export * from "./limits.ts";
export * from "./policy.ts";
export * from "./rollout.ts";
export * from "./tasks.ts";
export * from "./tracking.ts";
export * from "./trainer.ts";
export * from "./transport.ts";

/**
 * One experiment, fully described. Every field has a default, so `{}` is a valid (embedded
 * default) experiment; unknown keys anywhere are rejected rather than silently ignored.
 */
export const ExperimentConfig = z
  .object({
    experimentId: z
      .string()
      .regex(/^[a-z0-9][a-z0-9-]{0,62}$/, "lowercase letters, digits and '-', at most 63 characters")
      .default("default")
      .describe("experiment id; keys, queue messages and logs carry it"),
    seed: z.number().int().nonnegative().default(0).describe("seed of every random choice"),
    runDir: z.string().default("runs").describe("parent folder of run folders (metrics, report)"),
    transport: TransportConfig.prefault({}),
    tasks: TasksConfig.prefault({}),
    policy: PolicyConfig.prefault({}),
    rollout: RolloutConfig.prefault({}),
    trainer: TrainerConfig.prefault({}),
    evaluation: EvaluationConfig.prefault({}),
    limits: LimitsConfig.prefault({}),
    tracking: TrackingConfig.prefault({}),
    gateway: GatewayConfig.prefault({}),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.rollout.crossPolicy.enabled) {
      const external = c.rollout.crossPolicy.external.reduce((sum, e) => sum + e.probability, 0);
      const total = external + c.rollout.crossPolicy.staleProbability;
      if (total > 1)
        ctx.addIssue({
          code: "custom",
          path: ["rollout", "crossPolicy"],
          message: `stale + external probabilities sum to ${total}; at most 1 is allowed (the rest goes to the current policy)`,
        });
    }
    const syncEngine = c.rollout.syncEngine;
    if (c.rollout.versionSource === "sync" && syncEngine !== undefined) {
      const ids = c.policy.syncEngines.map(engineIdOf);
      if (!ids.includes(syncEngine))
        ctx.addIssue({
          code: "custom",
          path: ["rollout", "syncEngine"],
          message: `"${syncEngine}" is no engine of policy.syncEngines (ids: ${ids.join(", ") || "none"}); only those get a sync record`,
        });
    }
    if (c.rollout.maxTokensPerTurn > c.rollout.maxTotalTokens)
      ctx.addIssue({
        code: "custom",
        path: ["rollout", "maxTokensPerTurn"],
        message: `${c.rollout.maxTokensPerTurn} exceeds rollout.maxTotalTokens (${c.rollout.maxTotalTokens})`,
      });
    if (c.rollout.maxTotalTokens > c.policy.model.contextLength)
      ctx.addIssue({
        code: "custom",
        path: ["rollout", "maxTotalTokens"],
        message: `${c.rollout.maxTotalTokens} exceeds policy.model.contextLength (${c.policy.model.contextLength})`,
      });
  });
export type ExperimentConfig = z.infer<typeof ExperimentConfig>;
export type ExperimentConfigInput = z.input<typeof ExperimentConfig>;

/** Prefix of environment overrides: `AGENTRL__trainer__maxSteps=5` sets trainer.maxSteps. */
export const ENV_OVERRIDE_PREFIX = "AGENTRL__";

/**
 * Sets `dotted.path=value` on a plain object; the value is read as a YAML scalar (numbers, booleans,
 * strings) or flow collection. A numeric segment indexes a list the config already has
 * (`tasks.mix.0.trainInstances=16` changes one entry and keeps the others).
 */
export function applyOverride(target: Record<string, unknown>, assignment: string): void {
  const eq = assignment.indexOf("=");
  if (eq <= 0) throw new ValidationError("override", [{ path: assignment, message: "expected path=value" }]);
  setConfigPath(target, assignment.slice(0, eq), parseYaml(assignment.slice(eq + 1)), "override");
}

/** Collects `AGENTRL__a__b=value` variables as `a.b=value` assignments. */
export function envOverrides(env: NodeJS.ProcessEnv = process.env): string[] {
  return Object.entries(env)
    .filter(([key, value]) => key.startsWith(ENV_OVERRIDE_PREFIX) && value !== undefined)
    .map(([key, value]) => `${key.slice(ENV_OVERRIDE_PREFIX.length).split("__").join(".")}=${value}`);
}

/** Validates a raw config object, throwing a ValidationError that names every failing field. */
export function parseConfig(raw: unknown): ExperimentConfig {
  assertSafeConfigTree(raw, "config");
  const result = ExperimentConfig.safeParse(raw ?? {});
  if (!result.success) throw new ValidationError("config", issuesOf(result.error));
  return result.data;
}

/**
 * Loads an experiment config: file (YAML or JSON; none means all defaults), then environment
 * overrides, then explicit `--set` overrides, then validation.
 */
export async function loadConfig(
  file?: string,
  options: { overrides?: readonly string[]; env?: NodeJS.ProcessEnv } = {},
): Promise<ExperimentConfig> {
  let raw: unknown = {};
  if (file) {
    const text = await readFile(file, "utf8").catch((error: NodeJS.ErrnoException) => {
      throw new ValidationError("config", [
        { path: "", message: `cannot read ${file}: ${error.code ?? error.message}` },
      ]);
    });
    try {
      raw = parseYaml(text) ?? {};
    } catch (error) {
      throw new ValidationError("config", [
        { path: "", message: `${file} is not valid YAML/JSON: ${(error as Error).message}` },
      ]);
    }
    if (typeof raw !== "object" || Array.isArray(raw))
      throw new ValidationError("config", [{ path: "", message: `${file} must hold a mapping` }]);
    assertSafeConfigTree(raw, "config");
  }
  const target = raw as Record<string, unknown>;
  for (const assignment of [...envOverrides(options.env), ...(options.overrides ?? [])])
    applyOverride(target, assignment);
  return parseConfig(target);
}
