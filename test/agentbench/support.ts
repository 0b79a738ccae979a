import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { AGENTBENCH_DIR_ENV } from "../../shared/agentbench/data.ts";
import type { Requirement } from "../support/requirements.ts";

export { requireOrSkip } from "../support/requirements.ts";

/**
 * What the AgentBench tests need from the machine: the published data (`../shared/agentbench`
 * beside the checkout, AGENTRL_AGENTBENCH_DIR, or `.agentrl/agentbench` after
 * `agentrl data fetch agentbench`) and, for DBBench, a MySQL-compatible server (AGENTRL_MYSQL_URL
 * or Debian's mariadb-server).
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

export function agentBenchMissing(): Requirement[] {
  return agentBenchDataDir()
    ? []
    : [{ missing: "no AgentBench data", install: "npx agentrl data fetch agentbench, or set AGENTRL_AGENTBENCH_DIR" }];
}

export function mysqlMissing(): Requirement[] {
  return mysqlAvailable()
    ? []
    : [
        {
          missing: "no MySQL-compatible server",
          install: "apt-get install -y mariadb-server, or set AGENTRL_MYSQL_URL",
        },
      ];
}
