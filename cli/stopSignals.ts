import type { Logger } from "../shared/log.ts";

/**
 * Seconds a service gets to close after SIGINT or SIGTERM before it exits anyway: under ECS's
 * default stop timeout (30 s; our task definitions give 60 s), so the orchestrator never has to
 * SIGKILL a service whose close is stuck on a peer.
 */
export const CLOSE_DEADLINE_SECONDS = 25;

export interface StopSignalOptions {
  readonly log: Logger;
  /** @default CLOSE_DEADLINE_SECONDS */
  readonly deadlineSeconds?: number;
  /** Ends the process; tests pass a recorder. @default process.exit */
  readonly exit?: (code: number) => void;
  /** Where the signals come from; tests pass an emitter. @default process */
  readonly signals?: Pick<NodeJS.Process, "once">;
}

/**
 * Closes a long-running service on the first SIGINT or SIGTERM, then exits: 0 when it closed,
 * 1 when closing failed (logged), and 0 with a warning when closing is still under way after the
 * deadline. Services hold no state that waiting longer would save (trajectories and checkpoints
 * are in the stores by then), and a stuck close must not turn a stop into a kill.
 */
export function exitOnStopSignal(close: () => Promise<unknown>, options: StopSignalOptions): void {
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const deadlineSeconds = options.deadlineSeconds ?? CLOSE_DEADLINE_SECONDS;
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    const started = Date.now();
    const deadline = setTimeout(() => {
      options.log.warn(
        { signal, deadlineSeconds },
        `still closing ${deadlineSeconds} s after ${signal}; exiting without waiting further`,
      );
      exit(0);
    }, deadlineSeconds * 1000);
    close().then(
      () => {
        clearTimeout(deadline);
        options.log.info({ signal, seconds: (Date.now() - started) / 1000 }, "closed");
        exit(0);
      },
      (error: unknown) => {
        clearTimeout(deadline);
        options.log.error({ err: error, signal }, "closing failed");
        exit(1);
      },
    );
  };
  const signals = options.signals ?? process;
  signals.once("SIGINT", () => stop("SIGINT"));
  signals.once("SIGTERM", () => stop("SIGTERM"));
}

/**
 * A container's entrypoint is PID 1, and the kernel drops signals PID 1 has no handler for: until
 * the role installs its own SIGTERM handler (after loading weights, starting workers...), a stop
 * would wait for SIGKILL. This handler exits at once in that window and steps aside while the
 * role's own handler is installed (a second signal, after the role's one-shot handler ran, exits at once).
 */
export function exitOnSignalUntilHandled(exit: (code: number) => void = (code) => process.exit(code)): void {
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    const early = () => {
      if (process.listenerCount(signal) > 1) return; // the role handles it
      exit(0);
    };
    process.on(signal, early);
  }
}
