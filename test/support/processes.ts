import { readdirSync, readFileSync } from "node:fs";

/** Command lines of the running processes that mention `text` (a run folder, a temp dir). */
export function processesNaming(text: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const command = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
      if (command.includes(text)) found.push(command);
    } catch {
      // The process ended while we looked.
    }
  }
  return found;
}

/** Process ids of the running processes whose command line mentions every one of `texts`. */
export function processIdsNaming(...texts: string[]): number[] {
  const found: number[] = [];
  for (const pid of readdirSync("/proc").filter((name) => /^\d+$/.test(name))) {
    try {
      const command = readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " ");
      if (texts.every((text) => command.includes(text))) found.push(Number(pid));
    } catch {
      // The process ended while we looked.
    }
  }
  return found;
}
