/**
 * Exit codes, the same for every subcommand (README "Commands and exit codes"): 0 done (help and --version
 * too), 1 it ran and failed, 2 the command line or config was wrong and nothing ran, 130 stopped
 * by Ctrl-C. A module of its own so tests can import it without running the CLI.
 */
export const EXIT_CODES = { ok: 0, failed: 1, usage: 2, interrupted: 130 } as const;
