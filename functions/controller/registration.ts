import { ValidationError } from "../../shared/errors.ts";
import type { Heartbeat } from "../../shared/protocol/envApi.ts";

/**
 * Caps on what heartbeats may register, so that no caller (even one holding the env secret, or
 * any caller when none is set) can grow the controller's memory without bound. Past a cap a
 * heartbeat answers 400 naming the field and the cap, and nothing is registered.
 */
export interface RegistrationLimits {
  /** Tasks registered at once. @default 64 */
  readonly maxTasks: number;
  /** Workers registered at once, over all tasks. @default 1024 */
  readonly maxWorkers: number;
  /** Sessions one worker may announce (`concurrency`). @default 4096 */
  readonly maxConcurrency: number;
  /** Indices one task may announce. @default 100000 */
  readonly maxIndices: number;
}

export const DEFAULT_REGISTRATION_LIMITS: RegistrationLimits = {
  maxTasks: 64,
  maxWorkers: 1024,
  maxConcurrency: 4096,
  maxIndices: 100_000,
};

/** What the controller holds now, as far as the caps care. */
export interface RegistryCounts {
  readonly taskKnown: boolean;
  readonly workerKnown: boolean;
  readonly tasks: number;
  readonly workers: number;
}

/** Throws a ValidationError (HTTP 400) when registering `beat` would pass a cap or its address is not http(s). */
export function checkRegistration(beat: Heartbeat, counts: RegistryCounts, limits: RegistrationLimits): void {
  const issues: Array<{ path: string; message: string }> = [];
  const protocol = safeProtocol(beat.address);
  if (protocol !== "http:" && protocol !== "https:")
    issues.push({ path: "address", message: "must be an http(s) URL" });
  if (beat.concurrency > limits.maxConcurrency)
    issues.push({ path: "concurrency", message: `${beat.concurrency} exceeds the cap of ${limits.maxConcurrency}` });
  if (beat.indices.length > limits.maxIndices)
    issues.push({
      path: "indices",
      message: `${beat.indices.length} indices exceed the cap of ${limits.maxIndices}`,
    });
  if (!counts.taskKnown && counts.tasks >= limits.maxTasks)
    issues.push({ path: "name", message: `the controller already serves its cap of ${limits.maxTasks} tasks` });
  if (!counts.workerKnown && counts.workers >= limits.maxWorkers)
    issues.push({ path: "address", message: `the controller already holds its cap of ${limits.maxWorkers} workers` });
  if (issues.length > 0) throw new ValidationError("heartbeat", issues);
}

function safeProtocol(url: string): string | undefined {
  try {
    return new URL(url).protocol;
  } catch {
    return undefined;
  }
}
