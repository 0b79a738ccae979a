import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { AGENTBENCH_DIR_ENV } from "../../shared/agentbench/data.ts";

/**
 * What the AgentBench tests need from the machine: the published data (`../shared/agentbench`
 * beside the checkout, AGENTRL_AGENTBENCH_DIR, or `.agentrl/agentbench` after
 * `agentrl data fetch agentbench`) and, for DBBench, a MySQL-compatible server (AGENTRL_MYSQL_URL
 * or Debian's mariadb-server). Without them a file skips by name and says how to get them;
 * under CI=true a missing part fails the run instead, so CI proves every test.
 */
export function agentBenchDataDir(): string | undefined {
  const candidates = [
    process.env[AGENTBENCH_DIR_ENV],
    resolve(import.meta.dirname, "../../../shared/agentbench"),
    resolve(".agentrl/agentbench"),
  ];
  const found = candidates.find((dir) => dir && existsSync(resolve(dir, "data/dbbench/standard.jsonl")));
  if (found) process.env[AGENTBENCH_DIR_ENV] = resolve(found);
  return found;
}

export function mysqlAvailable(): boolean {
  if (process.env.AGENTRL_MYSQL_URL) return true;
  return ["/usr/sbin/mariadbd", "/usr/bin/mariadbd", "/usr/sbin/mysqld"].some((p) => existsSync(p));
}

/** Skips a file by name with the command that installs what is missing; fails instead under CI=true. */
export function requireOrSkip(file: string, what: string, missing: readonly string[]): boolean {
  if (missing.length === 0) return true;
  const line = `${file}: SKIPPED '${what}' - ${missing.join("; ")}`;
  if (process.env.CI === "true") throw new Error(`${line} (CI must run it)`);
  process.stderr.write(`${line}\n`);
  return false;
}
