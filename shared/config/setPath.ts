import { ValidationError } from "../errors.ts";
import { assertSafeConfigPath } from "./safePath.ts";

/**
 * Sets a dotted `path` on a raw (not yet validated) config tree: the one setter behind `--set`,
 * `AGENTRL__...` variables and sweep grids. Missing objects on the way are created; a numeric
 * segment picks an entry of a list the tree already has (`tasks.mix.0.trainInstances`), so one
 * entry changes and the others stay. Errors name the path and say what would work.
 */
export function setConfigPath(target: Record<string, unknown>, path: string, value: unknown, what: string): void {
  assertSafeConfigPath(path, what);
  const keys = path.split(".");
  const fail = (depth: number, message: string) =>
    new ValidationError(what, [{ path: keys.slice(0, depth + 1).join("."), message }]);
  let node: Record<string, unknown> | unknown[] = target;
  for (const [depth, key] of keys.entries()) {
    const last = depth === keys.length - 1;
    if (Array.isArray(node)) {
      const index = /^\d+$/.test(key) ? Number(key) : Number.NaN;
      if (!(index < node.length))
        throw fail(
          depth,
          `${keys.slice(0, depth).join(".")} is a list of ${node.length}: an index from 0 to ${node.length - 1} picks an entry`,
        );
      if (last) {
        node[index] = value;
        return;
      }
      const next = node[index];
      if (typeof next !== "object" || next === null) throw fail(depth, `${key} is not an object`);
      node = next as Record<string, unknown> | unknown[];
      continue;
    }
    if (last) {
      node[key] = value;
      return;
    }
    const next = node[key];
    if (next === undefined) {
      if (/^\d+$/.test(keys[depth + 1] as string))
        throw fail(
          depth,
          `is not set here, so it has no entry ${keys[depth + 1]}: set the whole list (${keys.slice(0, depth + 1).join(".")}=[...]) or start from a config that has it`,
        );
      node[key] = {};
    } else if (typeof next !== "object" || next === null) throw fail(depth, `${key} is not an object`);
    node = node[key] as Record<string, unknown> | unknown[];
  }
}
