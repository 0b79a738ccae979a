import { configFields } from "../shared/config/reference.ts";
import { ValidationError } from "../shared/errors.ts";

/** Optimal string alignment distance (Levenshtein plus adjacent swaps), case-insensitive. */
export function editDistance(a: string, b: string): number {
  const x = a.toLowerCase();
  const y = b.toLowerCase();
  const d = Array.from({ length: x.length + 1 }, (_, i) =>
    Array.from({ length: y.length + 1 }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i <= x.length; i++)
    for (let j = 1; j <= y.length; j++) {
      const row = d[i] as number[];
      const prev = d[i - 1] as number[];
      const cost = x[i - 1] === y[j - 1] ? 0 : 1;
      row[j] = Math.min((prev[j] as number) + 1, (row[j - 1] as number) + 1, (prev[j - 1] as number) + cost);
      if (i > 1 && j > 1 && x[i - 1] === y[j - 2] && x[i - 2] === y[j - 1])
        row[j] = Math.min(row[j] as number, ((d[i - 2] as number[])[j - 2] as number) + 1);
    }
  return (d[x.length] as number[])[y.length] as number;
}

/** The candidate nearest to `word`, when it is near enough to be a typo of it (about a third of its letters). */
export function closest(word: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = Math.max(1, Math.floor(word.length / 3));
  for (const candidate of candidates) {
    const distance = editDistance(word, candidate);
    if (distance <= bestDistance && (best === undefined || distance < bestDistance)) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

const UNKNOWN_FIELD = "unknown field (not allowed here)";

/** Every config path, objects included, with array indices written `[]`: `tasks.mix[].name`, `tasks.mix`, `tasks`. */
function knownConfigPaths(): Set<string> {
  const paths = new Set<string>();
  for (const { path } of configFields()) {
    const parts = path.split(".");
    for (let i = 1; i <= parts.length; i++) paths.add(parts.slice(0, i).join(".").replace(/\[\]$/, ""));
  }
  return paths;
}

function splitPath(path: string): { parent: string; key: string } {
  const dot = path.lastIndexOf(".");
  return dot < 0 ? { parent: "", key: path } : { parent: path.slice(0, dot), key: path.slice(dot + 1) };
}

/**
 * A hint for an unknown config field: the nearest field at the same place (`trainer.maxStep` →
 * `trainer.maxSteps`), else a field of that name elsewhere (`maxSteps` → `trainer.maxSteps`),
 * else the fields allowed at that place.
 */
export function unknownFieldHint(path: string, known: ReadonlySet<string> = knownConfigPaths()): string {
  const normalized = path.replace(/\[\d+\]/g, "[]");
  const { parent, key } = splitPath(normalized);
  const siblings = [...known].filter((p) => splitPath(p).parent === parent).map((p) => splitPath(p).key);
  const near = closest(key, siblings);
  const written = splitPath(path).parent; // as the user wrote it, indices included
  if (near) return `unknown field; did you mean ${written ? `${written}.` : ""}${near}?`;
  const elsewhere = [...known].filter((p) => {
    const other = splitPath(p).key;
    return other.toLowerCase() === key.toLowerCase() || editDistance(other, key) <= 1;
  });
  if (elsewhere.length > 0 && elsewhere.length <= 3) return `unknown field; did you mean ${elsewhere.join(" or ")}?`;
  if (siblings.length === 0) return UNKNOWN_FIELD;
  return `unknown field; allowed ${parent ? `in ${parent}` : "at the top level"}: ${siblings.join(", ")}`;
}

/** The same error with a "did you mean" on every unknown config field it names. */
export function withFieldHints(error: ValidationError): ValidationError {
  if (!error.issues.some((i) => i.message === UNKNOWN_FIELD)) return error;
  const known = knownConfigPaths();
  return new ValidationError(
    error.what,
    error.issues.map((i) => (i.message === UNKNOWN_FIELD ? { ...i, message: unknownFieldHint(i.path, known) } : i)),
  );
}
