import { randomBytes } from "node:crypto";
import { z } from "zod";
import { issuesOf, ValidationError } from "../errors.ts";

/**
 * The shared secrets of a deployment, read from the process environment only (never from the
 * experiment config, which is written to run folders and logged). On AWS, ECS injects them from
 * Secrets Manager (infra/); the local pipeline generates fresh ones per run when they are unset.
 *
 * - `AGENTRL_ENV_SECRET`: controller <-> env workers. Heartbeats and every controller-to-worker
 *   call carry it; when set, both sides answer 401 to anything without it.
 * - `AGENTRL_CONTROLLER_SECRET`: callers of the controller's session API (rollout workers,
 *   evaluator). Optional; unset leaves that API open to whoever can reach it.
 * - `AGENTRL_POLICY_API_KEY`: callers of our policy servers (like vLLM's `--api-key`). Optional.
 * - `AGENTRL_GATEWAY_ADMIN_KEY`: who may open gateway sessions (`POST /v1/sessions`). The gateway
 *   refuses to start without it; each session then gets its own key, good for that session only.
 * - `AGENTRL_METRICS_TOKEN`: Prometheus scrapers of `/metrics` on every role (shared/metrics.ts).
 *   Read-only, so a scraper holds none of the keys above. Optional; unset leaves /metrics open.
 */
export const SECRET_VARIABLES = {
  envSecret: "AGENTRL_ENV_SECRET",
  controllerSecret: "AGENTRL_CONTROLLER_SECRET",
  policyApiKey: "AGENTRL_POLICY_API_KEY",
  gatewayAdminKey: "AGENTRL_GATEWAY_ADMIN_KEY",
  metricsToken: "AGENTRL_METRICS_TOKEN",
} as const;

const Secret = z
  .string()
  .min(16, "must be at least 16 characters")
  .max(4096, "must be at most 4096 characters")
  .regex(/^[\x21-\x7e]+$/, "must be printable ASCII without spaces (it travels in an HTTP header)");

const SecretsEnv = z.object({
  AGENTRL_ENV_SECRET: Secret.optional(),
  AGENTRL_CONTROLLER_SECRET: Secret.optional(),
  AGENTRL_POLICY_API_KEY: Secret.optional(),
  AGENTRL_GATEWAY_ADMIN_KEY: Secret.optional(),
  AGENTRL_METRICS_TOKEN: Secret.optional(),
});

export interface Secrets {
  readonly envSecret?: string;
  readonly controllerSecret?: string;
  readonly policyApiKey?: string;
  readonly gatewayAdminKey?: string;
  readonly metricsToken?: string;
}

/** Reads the secrets from `env`; a malformed one throws naming the variable (never its value). */
export function readSecrets(env: NodeJS.ProcessEnv = process.env): Secrets {
  const picked = Object.fromEntries(
    Object.values(SECRET_VARIABLES)
      .filter((name) => env[name] !== undefined && env[name] !== "")
      .map((name) => [name, env[name]]),
  );
  const parsed = SecretsEnv.safeParse(picked);
  if (!parsed.success)
    throw new ValidationError(
      "secret environment",
      // zod echoes no input values in these messages, so the secret never reaches a log line
      issuesOf(parsed.error),
    );
  return {
    ...(parsed.data.AGENTRL_ENV_SECRET ? { envSecret: parsed.data.AGENTRL_ENV_SECRET } : {}),
    ...(parsed.data.AGENTRL_CONTROLLER_SECRET ? { controllerSecret: parsed.data.AGENTRL_CONTROLLER_SECRET } : {}),
    ...(parsed.data.AGENTRL_POLICY_API_KEY ? { policyApiKey: parsed.data.AGENTRL_POLICY_API_KEY } : {}),
    ...(parsed.data.AGENTRL_GATEWAY_ADMIN_KEY ? { gatewayAdminKey: parsed.data.AGENTRL_GATEWAY_ADMIN_KEY } : {}),
    ...(parsed.data.AGENTRL_METRICS_TOKEN ? { metricsToken: parsed.data.AGENTRL_METRICS_TOKEN } : {}),
  };
}

/** The secrets of `env`, with a fresh random value for each one that is unset (the local pipeline). */
export function withGeneratedSecrets(env: NodeJS.ProcessEnv = process.env): Required<Secrets> {
  const given = readSecrets(env);
  const fresh = () => randomBytes(24).toString("base64url");
  return {
    envSecret: given.envSecret ?? fresh(),
    controllerSecret: given.controllerSecret ?? fresh(),
    policyApiKey: given.policyApiKey ?? fresh(),
    gatewayAdminKey: given.gatewayAdminKey ?? fresh(),
    metricsToken: given.metricsToken ?? fresh(),
  };
}

/** The secrets as environment variables for a child process. */
export function secretEnv(secrets: Secrets): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [field, name] of Object.entries(SECRET_VARIABLES)) {
    const value = secrets[field as keyof Secrets];
    if (value !== undefined) out[name] = value;
  }
  return out;
}
