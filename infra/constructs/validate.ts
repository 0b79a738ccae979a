import { type Duration, Token } from "aws-cdk-lib";

/** Thrown at synth time when a construct prop is out of range; the message shows value and range. */
export class InvalidPropError extends Error {
  override readonly name = "InvalidPropError";
}

/**
 * Checks `min <= value <= max` for a plain (non-token) number and throws naming the prop.
 * @example requireRange("Messaging", "maxReceiveCount", 0, 1, 1000) // throws: ... got 0, allowed 1..1000
 */
export function requireRange(owner: string, prop: string, value: number, min: number, max: number): void {
  if (Token.isUnresolved(value)) return;
  if (!Number.isFinite(value) || value < min || value > max)
    throw new InvalidPropError(`${owner}: ${prop} must be within ${min}..${max}, got ${value}`);
}

/** Same as requireRange for durations, compared in seconds. */
export function requireDurationRange(owner: string, prop: string, value: Duration, min: Duration, max: Duration): void {
  if (value.isUnresolved()) return;
  const seconds = value.toSeconds();
  if (seconds < min.toSeconds() || seconds > max.toSeconds())
    throw new InvalidPropError(
      `${owner}: ${prop} must be within ${min.toSeconds()}..${max.toSeconds()} s, got ${seconds} s (${value.toHumanString()})`,
    );
}
