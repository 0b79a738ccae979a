import { type DestinationStream, destination as fileDestination, type Logger, pino, stdTimeFunctions } from "pino";

export type { Logger };

/** Correlation keys that log lines carry so one trajectory or version can be followed across roles. */
export interface LogContext {
  role?: string;
  experimentId?: string;
  trajectoryId?: string;
  policyVersion?: number;
  [key: string]: unknown;
}

/**
 * JSON-lines logger on stderr (stdout stays free for command output). Correlation keys given
 * here, or later through `logger.child({ trajectoryId })`, appear on every line.
 * Level from AGENTRL_LOG_LEVEL (default `info`; under vitest `warn`).
 * @example createLogger({ role: "trainer", experimentId }).child({ policyVersion: 3 }).info("published")
 */
export function createLogger(context: LogContext = {}, destination?: DestinationStream): Logger {
  const level = process.env.AGENTRL_LOG_LEVEL ?? (process.env.VITEST ? "warn" : "info");
  return pino(
    { level, base: { pid: process.pid, ...context }, timestamp: stdTimeFunctions.isoTime },
    destination ?? fileDestination({ fd: 2, sync: true }),
  );
}
