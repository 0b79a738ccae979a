import { afterAll, beforeAll } from "vitest";

/**
 * Setup file of the test files that share a process (vitest.config.ts, "shared"): whatever a file
 * or the code it runs sets in process.env (an API key, a data folder) is undone when the file ends,
 * so neither the next file nor the processes it spawns inherit it.
 */
let before: Record<string, string | undefined> = {};

beforeAll(() => {
  before = { ...process.env };
});

afterAll(() => {
  for (const key of Object.keys(process.env)) if (!(key in before)) delete process.env[key];
  for (const [key, value] of Object.entries(before)) if (process.env[key] !== value) process.env[key] = value;
});
