import { readFileSync } from "node:fs";

/**
 * Whether `pid` is a running process: it exists (under any user: EPERM says so too) and is not a
 * zombie, a process that has ended and waits for its parent to reap it. Where there is no /proc
 * (macOS) the signal check is all there is. A pid can be recycled: callers that must know it is
 * still *their* process check its command line as well.
 */
export function processRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    return state !== "Z";
  } catch {
    return true;
  }
}
