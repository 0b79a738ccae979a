import { processRuns } from "../shared/processes.ts";

/**
 * The launcher that starts a run's roles as child processes (`agentrl train`, `start`, `eval`,
 * the deploy rehearsal) puts its pid here; every process it starts, and the env workers those
 * start, inherit it.
 */
export const SUPERVISOR_PID_ENV = "AGENTRL_SUPERVISOR_PID";

/**
 * Stops this process, through its own SIGTERM handling, once the launcher named by
 * AGENTRL_SUPERVISOR_PID is gone: a launcher that was SIGKILLed cannot stop its roles, which
 * would otherwise run on with nobody to use them (a trainer waiting for batches, policy servers,
 * env workers). Does nothing when the variable is not set (a role started by hand, an ECS task).
 */
export function stopWhenSupervisorGone(env: NodeJS.ProcessEnv = process.env, intervalMs = 1_000): void {
  const pid = Number(env[SUPERVISOR_PID_ENV]);
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid) return;
  const timer = setInterval(() => {
    if (processRuns(pid)) return;
    clearInterval(timer);
    process.kill(process.pid, "SIGTERM");
  }, intervalMs);
  timer.unref();
}
