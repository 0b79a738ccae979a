import { ValidationError } from "../errors.ts";

/**
 * Keys that reach an object's prototype when used as a property name. A config path or a config
 * mapping that names one of them could pollute `Object.prototype` for the whole process (every
 * later `{}` would carry the injected field), so they are rejected wherever user text becomes a
 * property name: `--set`, `AGENTRL__...` variables, sweep grid paths and config/sweep files.
 */
export const FORBIDDEN_CONFIG_KEYS: ReadonlySet<string> = new Set(["__proto__", "constructor", "prototype"]);

const REASON = "__proto__, constructor and prototype are not allowed as config keys (prototype pollution)";

/** Throws a ValidationError naming `path` when one of its dotted segments is a forbidden key. */
export function assertSafeConfigPath(path: string, what: string): void {
  const bad = path.split(".").find((segment) => FORBIDDEN_CONFIG_KEYS.has(segment));
  if (bad !== undefined) throw new ValidationError(what, [{ path, message: `"${bad}": ${REASON}` }]);
}

/**
 * Throws a ValidationError at the first forbidden key anywhere in a parsed YAML/JSON tree (YAML
 * and JSON.parse both create an own `__proto__` property, which structuredClone or a merge would
 * turn into a prototype change).
 */
export function assertSafeConfigTree(value: unknown, what: string, path = ""): void {
  if (typeof value !== "object" || value === null) return;
  for (const key of Object.keys(value)) {
    const at = path ? `${path}.${key}` : key;
    if (FORBIDDEN_CONFIG_KEYS.has(key)) throw new ValidationError(what, [{ path: at, message: REASON }]);
    assertSafeConfigTree((value as Record<string, unknown>)[key], what, at);
  }
}
