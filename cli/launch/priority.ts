import { readdirSync } from "node:fs";
import { getPriority, setPriority } from "node:os";
import { z } from "zod";

/**
 * CPU priorities of the local launcher's roles, as niceness added to the launcher's own (Linux
 * `nice`: 0 is the launcher's share, each step up ~1.25x less CPU under contention, 19 the least).
 *
 * Why: on a machine with fewer cores than busy roles (the local default), the trainer's long
 * compute-bound steps take CPU time slices from the policy server and the rollout workers, so
 * generation slows while the trainer works, and in async mode the trainer then waits for data.
 * Generation is the pipeline's bottleneck when the trainer keeps up (its busy fraction < 1), so a
 * nicer trainer would take only the CPU generation leaves idle. Measured, it made no difference
 * (`npm run bench:pipeline -- --compare-nice`: trainer +5 against all equal, on a quiet machine and
 * under load), and under other programs' load a nicer trainer yields to them too, so every role
 * starts equal; `PipelineOptions.niceness` sets a priority where it helps.
 * Only ever added (a process may raise its niceness without privileges, not lower it).
 */
const Niceness = z.number().int().min(0).max(19);

export const RoleNiceness = z
  .object({
    trainer: Niceness.default(0).describe("the trainer (and the SFT warm-up)"),
    policy: Niceness.default(0).describe("policy servers (generation)"),
    rollout: Niceness.default(0).describe("rollout workers"),
    env: Niceness.default(0).describe("controller, env pools and the env workers they launch"),
    feeder: Niceness.default(0).describe("the feeder"),
  })
  .strict();
export type RoleNiceness = z.infer<typeof RoleNiceness>;

/** No priorities: every role at the launcher's niceness. */
export const EQUAL_NICENESS: RoleNiceness = { trainer: 0, policy: 0, rollout: 0, env: 0, feeder: 0 };

/**
 * Which entry of RoleNiceness a role name (as the launcher names roles) falls under; undefined for
 * a role that keeps the launcher's niceness (evaluation runs).
 *
 * @example
 * roleKind("rollout-1") // "rollout"; roleKind("policy-current") // "policy"
 */
export function roleKind(name: string): keyof RoleNiceness | undefined {
  if (name === "trainer" || name === "sft") return "trainer";
  if (name === "feeder") return "feeder";
  if (name === "controller" || name.startsWith("env-") || name.startsWith("envpool-")) return "env";
  if (name.startsWith("rollout-")) return "rollout";
  // eval policy servers serve the closing evaluation, which nothing runs beside
  if (name.startsWith("policy-") && !name.startsWith("policy-eval-")) return "policy";
  return undefined;
}

/** The niceness to add for a role name under `niceness` (0 for roles it does not cover). */
export function nicenessFor(niceness: RoleNiceness, name: string): number {
  const kind = roleKind(name);
  return kind === undefined ? 0 : niceness[kind];
}

/**
 * Raises process `pid`'s niceness by `delta` over this process's own (capped at 19); the threads
 * and children it starts afterwards inherit it. Returns the niceness set, or the error's message
 * when the OS refused (the role then runs at the launcher's niceness; never a reason to fail a run).
 */
export function addNiceness(pid: number, delta: number): { readonly niceness: number } | { readonly error: string } {
  const niceness = Math.min(19, getPriority() + delta);
  try {
    setPriority(pid, niceness);
    // Linux sets a priority per thread: a thread the child started before this call (Node starts
    // its platform threads early) keeps the old one unless it is set too; later ones inherit
    for (const tid of threadsOf(pid)) if (tid !== pid) setPriority(tid, niceness);
    return { niceness };
  } catch (error) {
    return { error: (error as Error).message };
  }
}

/** Thread ids of a process from /proc (empty where there is no /proc, or the process has gone). */
function threadsOf(pid: number): number[] {
  try {
    return readdirSync(`/proc/${pid}/task`).map(Number).filter(Number.isInteger);
  } catch {
    return [];
  }
}
