import { type ParseArgsConfig, parseArgs } from "node:util";
import type { z } from "zod";

/** How a script is run and what it takes: its usage line and the start of its messages. */
export interface ScriptUsage {
  /** What the user types before the flags, e.g. `npm run chaos --`. */
  readonly command: string;
  /** Its flags and arguments as a usage line shows them, e.g. `[--minutes N] [--keep]`. */
  readonly usage: string;
}

/**
 * A script's command line, read by node:util's parseArgs in strict mode. `--help` (or `-h`) prints
 * the usage line and exits 0 before anything runs; an unknown flag, a flag without its value or
 * an argument the script takes none of exits 2 with what was wrong and the usage line, instead of
 * a stack trace (or, for a script that read its flags by hand, a run that ignored them).
 */
export function readScriptArgs<T extends Omit<ParseArgsConfig, "args" | "strict">>(
  script: ScriptUsage,
  config: T,
  argv: readonly string[] = process.argv.slice(2),
): ReturnType<typeof parseArgs<T & { args: string[]; strict: true }>> {
  const flags = argv.includes("--") ? argv.slice(0, argv.indexOf("--")) : argv;
  if (flags.includes("--help") || flags.includes("-h")) {
    process.stdout.write(`usage: ${script.command} ${script.usage}\n`);
    process.exit(0);
  }
  try {
    return parseArgs({ ...config, args: [...argv], strict: true });
  } catch (error) {
    // node's message goes on to explain `--` for positionals that start with a dash
    return usageError(script, (error as Error).message.replace(/\. To specify a positional argument.*$/s, ""));
  }
}

/** Says what was wrong with a script's command line, and its usage line, then exits 2. */
export function usageError(script: ScriptUsage, message: string): never {
  const name = script.command.replace(/\s+--$/, "");
  process.stderr.write(`${name}: ${message}\nusage: ${script.command} ${script.usage}\n`);
  process.exit(2);
}

/** The flags' values checked by a zod schema; a value it refuses exits 2 naming the flag (see {@link usageError}). */
export function validateScriptArgs<S extends z.ZodTypeAny>(
  script: ScriptUsage,
  schema: S,
  values: unknown,
): z.infer<S> {
  const parsed = schema.safeParse(values);
  if (parsed.success) return parsed.data;
  return usageError(
    script,
    parsed.error.issues
      // the flag, not the place in its parsed value (`--concurrency`, not `--concurrency.0`)
      .map((issue) => `${issue.path.length > 0 ? `--${String(issue.path[0])}: ` : ""}${issue.message}`)
      .join("; "),
  );
}

/**
 * An AbortSignal that fires on the first SIGINT or SIGTERM, its reason the signal's name, for a
 * script that runs a pipeline or a rehearsal in its own process: passed down, it ends the run the
 * way its end does (roles stopped, temp folders removed) instead of the process dying with its
 * roles still running. A second signal exits at once with code 1.
 */
export function abortOnStopSignals(script: ScriptUsage, what: string): AbortSignal {
  const stop = new AbortController();
  const name = script.command.replace(/\s+--$/, "");
  for (const signal of ["SIGINT", "SIGTERM"] as const)
    process.on(signal, () => {
      if (stop.signal.aborted) process.exit(1);
      process.stderr.write(`${name}: ${signal}: stopping ${what}\n`);
      stop.abort(signal);
    });
  return stop.signal;
}
