import { afterAll } from "vitest";
import { removeTempDirs } from "./tmp.ts";

/**
 * Setup file of every test file (vitest.config.ts): the folders the file made with tempDir are
 * removed when it ends. vitest runs a setup file before each test file, also in a thread that
 * files share, so this hook is the file's own.
 */
afterAll(removeTempDirs);
