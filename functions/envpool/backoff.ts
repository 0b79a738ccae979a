import { sleep as defaultSleep } from "../../shared/sleep.ts";

/** AWS error names that mean "slow down", answered with backoff rather than failure. */
const THROTTLING = new Set([
  "ThrottlingException",
  "Throttling",
  "ThrottledException",
  "RequestLimitExceeded",
  "TooManyRequestsException",
  "ServiceUnavailable",
  "ServerException",
]);

/** Whether an AWS SDK error is worth retrying: throttling, a 5xx, or one the SDK marks retryable. */
export function isRetryableAwsError(error: unknown): boolean {
  if (typeof error !== "object" || error === null) return false;
  const e = error as { name?: unknown; $metadata?: { httpStatusCode?: number }; $retryable?: unknown };
  if (typeof e.name === "string" && THROTTLING.has(e.name)) return true;
  if (e.$retryable) return true;
  const status = e.$metadata?.httpStatusCode;
  return status !== undefined && status >= 500;
}

export interface BackoffOptions {
  /** Attempts in all (the first call included). @default 6 */
  readonly attempts?: number;
  /** First delay; doubled per retry, with full jitter. @default 200 */
  readonly baseMs?: number;
  /** @default 5000 */
  readonly maxMs?: number;
  /** Injectable for tests. */
  readonly sleep?: (ms: number) => Promise<void>;
  readonly random?: () => number;
  /** Called before each retry (logs, counters). */
  readonly onRetry?: (error: unknown, attempt: number, delayMs: number) => void;
}

/** Runs `call`, retrying retryable AWS errors with capped exponential backoff and full jitter. */
export async function withBackoff<T>(call: () => Promise<T>, options: BackoffOptions = {}): Promise<T> {
  const attempts = options.attempts ?? 6;
  const base = options.baseMs ?? 200;
  const max = options.maxMs ?? 5_000;
  const sleep = options.sleep ?? ((ms: number) => defaultSleep(ms));
  const random = options.random ?? Math.random;
  for (let attempt = 1; ; attempt++) {
    try {
      return await call();
    } catch (error) {
      if (attempt >= attempts || !isRetryableAwsError(error)) throw error;
      const delay = Math.round(random() * Math.min(max, base * 2 ** (attempt - 1)));
      options.onRetry?.(error, attempt, delay);
      await sleep(delay);
    }
  }
}
