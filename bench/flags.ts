/**
 * An integer command-line flag of a bench, or exit 2 with a message naming the flag, the value
 * and the allowed range (benches are scripts: a bad flag ends the run before anything starts).
 *
 * @example
 * intFlag("steps", values.steps, 3) // 10 for "--steps 10"; exits on "--steps 2" or "--steps x"
 */
export function intFlag(name: string, value: string, min: number, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(value);
  if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `in [${min}, ${max}]`;
    console.error(`--${name} must be an integer ${range}, got "${value}"`);
    process.exit(2);
  }
  return n;
}
