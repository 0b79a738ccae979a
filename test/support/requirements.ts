import { spawnSync } from "node:child_process";
import { appendFileSync, existsSync } from "node:fs";
import { SYNC_TIMEOUT_MS } from "./cli.ts";

/**
 * Tests that need a system tool the machine lacks (Chromium, numpy, MariaDB, protoc, podman) skip
 * by name instead of failing: each skip is one line on stderr, and the run ends with a summary of
 * what was skipped and the command that installs it (test/support/skipSummary.ts). Under CI=true
 * a missing tool fails the run instead, so CI proves every test.
 */

/** Where the skipped lines are collected for the end-of-run summary (set by the global setup). */
export const SKIP_LOG_ENV = "AGENTRL_TEST_SKIP_LOG";

export interface Requirement {
  /** What is missing, and the command that installs it. */
  readonly missing: string;
  readonly install: string;
}

/** Returns true when nothing is missing; else skips by name (or, with CI=true, throws). */
export function requireOrSkip(file: string, what: string, missing: readonly (Requirement | string)[]): boolean {
  if (missing.length === 0) return true;
  const reasons = missing.map((m) => (typeof m === "string" ? m : `${m.missing} (${m.install})`)).join("; ");
  const line = `${file}: SKIPPED '${what}' - ${reasons}`;
  if (process.env.CI === "true") throw new Error(`${line}; CI must run it`);
  process.stderr.write(`${line}\n`);
  const log = process.env[SKIP_LOG_ENV];
  if (log) appendFileSync(log, `${line}\n`);
  return false;
}

/** Debian's chromium (or CHROMIUM_PATH). */
export function chromiumMissing(): Requirement[] {
  const path = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium";
  return existsSync(path)
    ? []
    : [{ missing: `no Chromium at ${path}`, install: "apt-get install -y chromium, or set CHROMIUM_PATH" }];
}

/** python3 with numpy, for the independent Hugging Face reference forward. */
export function numpyMissing(): Requirement[] {
  const probe = spawnSync("python3", ["-c", "import numpy"], { stdio: "ignore", timeout: SYNC_TIMEOUT_MS });
  return probe.status === 0 ? [] : [{ missing: "no python3 numpy", install: "apt-get install -y python3-numpy" }];
}

/** A command on PATH (`protoc`, ...). */
export function commandMissing(command: string, install: string): Requirement[] {
  return spawnSync(command, ["--version"], { stdio: "ignore", timeout: SYNC_TIMEOUT_MS }).status === 0
    ? []
    : [{ missing: `no ${command}`, install }];
}

/** The Debian steps that give Dawn a Vulkan driver on a CPU (lavapipe); bookworm's own mesa 22.3 is refused. */
export const LAVAPIPE_INSTALL =
  "echo 'deb http://deb.debian.org/debian bookworm-backports main' > /etc/apt/sources.list.d/backports.list && apt-get update && apt-get install -y -t bookworm-backports mesa-vulkan-drivers";

/**
 * A WebGPU adapter from npm `webgpu` (Dawn): probed in a child process, so that the test process
 * loads Dawn only when a test is about to use it.
 */
export function webgpuAdapterMissing(): Requirement[] {
  const probe = spawnSync(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      "const { create } = await import('webgpu'); const a = await create([]).requestAdapter(); if (!a) process.exit(3); console.log(a.info.description);",
    ],
    { encoding: "utf8", timeout: 60_000 },
  );
  if (probe.status === 0) return [];
  const why = probe.status === 3 ? "no WebGPU adapter (no Vulkan driver Dawn accepts)" : "npm webgpu did not load";
  return [{ missing: why, install: LAVAPIPE_INSTALL }];
}
