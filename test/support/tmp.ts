import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Folders made by the running test file. test/support/removeTempDirs.ts, a setup file of every
 * project, removes them when the file ends: a hook registered here, at this module's top level,
 * would be registered once per worker thread (the module loads once in a thread its files share)
 * and so remove only the first file's folders.
 */
const made: string[] = [];

/** A fresh folder under the OS temp dir that is removed after the calling test file. */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  made.push(dir);
  return dir;
}

/** Removes the folders tempDir made since the last call. */
export function removeTempDirs(): void {
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}
