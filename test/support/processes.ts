import { readdirSync, readFileSync } from "node:fs";

/** Every running process's id and command line (arguments joined by spaces). */
function runningProcesses(): Array<{ readonly pid: number; readonly command: string }> {
  const found: Array<{ pid: number; command: string }> = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      found.push({ pid: Number(pid), command: readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ") });
    } catch {
      // The process ended while we looked.
    }
  }
  return found;
}

/** Command lines of the running processes that mention `text` (a run folder, a temp dir). */
export function processesNaming(text: string): string[] {
  return runningProcesses()
    .filter((p) => p.command.includes(text))
    .map((p) => p.command);
}

/** Process ids of the running processes whose command line mentions every one of `texts`. */
export function processIdsNaming(...texts: string[]): number[] {
  return runningProcesses()
    .filter((p) => texts.every((text) => p.command.includes(text)))
    .map((p) => p.pid);
}
