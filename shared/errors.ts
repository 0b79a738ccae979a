import type { z } from "zod";

/** Base class: every error we raise on purpose carries a stable name and an optional cause. */
export class AgentRlError extends Error {
  override readonly name: string = "AgentRlError";
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
  }
}

/** Input that failed a zod schema; `issues` keep the failing paths for 4xx bodies and CLI lines. */
export class ValidationError extends AgentRlError {
  override readonly name = "ValidationError";
  constructor(
    readonly what: string,
    readonly issues: ReadonlyArray<{ path: string; message: string }>,
  ) {
    super(`invalid ${what}: ${issues.map((i) => `${i.path || "(root)"}: ${i.message}`).join("; ")}`);
  }
}

/** Renders a zod path the way users write it: `tasks[2].weight`. */
export function formatPath(path: ReadonlyArray<PropertyKey>): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out ? `.${String(key)}` : String(key);
  }
  return out;
}

/** One entry per failing field; an unknown key is reported at its own path (`trainer.foo`), not its parent's. */
export function issuesOf(error: z.ZodError): Array<{ path: string; message: string }> {
  return error.issues.flatMap((issue) =>
    issue.code === "unrecognized_keys"
      ? issue.keys.map((key) => ({
          path: formatPath([...issue.path, key]),
          message: "unknown field (not allowed here)",
        }))
      : [{ path: formatPath(issue.path), message: issue.message }],
  );
}

/**
 * Parses `value` with `schema`, throwing a ValidationError naming every failing path.
 * @example parseOrThrow(RolloutRequest, JSON.parse(body), "RolloutRequest")
 */
export function parseOrThrow<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  const result = schema.safeParse(value);
  if (!result.success) throw new ValidationError(what, issuesOf(result.error));
  return result.data;
}

/** Parses JSON text then validates it; malformed JSON is a ValidationError too, never a SyntaxError. */
export function parseJsonOrThrow<S extends z.ZodType>(schema: S, text: string, what: string): z.output<S> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ValidationError(what, [{ path: "", message: `not valid JSON (${(error as Error).message})` }]);
  }
  return parseOrThrow(schema, value, what);
}
