import type { Supervisor } from "./supervisor.ts";

export interface PolicyServerSpec {
  /** Role name (log file name), e.g. `policy-current`. */
  readonly name: string;
  /** The run's resolved config file. */
  readonly configFile: string;
  /** `current` follows every version, `stale` every K-th; `pinned` serves `version` only. */
  readonly pool: "current" | "stale" | "pinned";
  /** For `pinned`: the version (number or `newest` at start). */
  readonly version?: number | "newest";
  /** Restarts after a crash, on the port it first got (it loads the newest version again). @default 0 */
  readonly maxRestarts?: number;
}

/** Starts `agentrl policy serve` as a child process and returns its OpenAI base URL (`.../v1`). */
export async function startPolicyServer(supervisor: Supervisor, spec: PolicyServerSpec): Promise<string> {
  const args = ["policy", "serve", "--port", "0", "--config", spec.configFile];
  if (spec.pool === "pinned") args.push("--pin", "--set", `policy.init=${spec.version ?? "newest"}`);
  else args.push("--pool", spec.pool);
  supervisor.start({ name: spec.name, args, maxRestarts: spec.maxRestarts ?? 0 });
  return `${await supervisor.guard(supervisor.urlOf(spec.name, 180_000))}/v1`;
}
