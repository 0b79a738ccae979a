import { afterAll } from "vitest";

/**
 * Setup file of the test files that share a worker thread (vitest.config.ts, "shared"): whatever a file
 * or the code it runs sets in process.env (an API key, a data folder) is undone when the file ends,
 * so neither the next file nor the processes it spawns inherit it. vitest runs a setup file again
 * before each test file and before importing it, so the snapshot also sees what the file's own
 * top level sets.
 */
const before: Record<string, string | undefined> = { ...process.env };

afterAll(() => {
  for (const key of Object.keys(process.env)) if (!(key in before)) delete process.env[key];
  for (const [key, value] of Object.entries(before)) if (process.env[key] !== value) process.env[key] = value;
});
