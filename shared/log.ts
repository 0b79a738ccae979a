import { type Logger, pino } from "pino";

export type { Logger };

/** Correlation keys that every log line may carry so one trajectory or version can be followed across roles. */
export interface LogContext {
  role?: string;
  experimentId?: string;
  trajectoryId?: string;
  policyVersion?: number;
  [key: string]: unknown;
}

/**
 * JSON-lines logger on stderr (stdout stays free for command output).
 * Level from AGENTRL_LOG_LEVEL (default `info`; tests default to `warn`).
 */
export function createLogger(context: LogContext = {}): Logger {
  const level = process.env.AGENTRL_LOG_LEVEL ?? (process.env.VITEST ? "warn" : "info");
  return pino({ level, base: { pid: process.pid, ...context } }, pino.destination(2));
}
