/**
 * The node flags of a data-parallel training process, in a module of their own so the launcher
 * can read them without loading TF.js.
 */

/**
 * V8 flags for a process that trains data-parallel. By default V8 collects garbage on helper
 * threads; one training thread then uses about 1.2 cores, and with both cores computing those
 * helpers take time from them. On this project's 2-core machine (bench:train, 3 interleaved runs
 * each, load 1.4–2.0) these flags raised two threads from 3,174–3,628 to 4,112–4,428 tok/s and
 * the speed-up over one thread from 1.28–1.34× to 1.48–1.60× (one thread: 2,487–2,715 →
 * 2,570–2,988 tok/s). They must be given to `node` itself (V8 rejects them in NODE_OPTIONS and
 * after start); the launcher adds them to a data-parallel trainer's command line.
 */
export const DATA_PARALLEL_NODE_FLAGS: readonly string[] = ["--single-threaded-gc", "--max-semi-space-size=64"];

/** The flags of DATA_PARALLEL_NODE_FLAGS this process was started without. */
export function missingNodeFlags(execArgv: readonly string[] = process.execArgv): string[] {
  return DATA_PARALLEL_NODE_FLAGS.filter((flag) => !execArgv.includes(flag));
}

/** The node flags for a process training over `threads` threads (none for one thread). */
export function nodeFlagsForThreads(threads: number): readonly string[] {
  return threads > 1 ? DATA_PARALLEL_NODE_FLAGS : [];
}
