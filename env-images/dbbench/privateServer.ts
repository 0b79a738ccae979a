import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { AgentRlError } from "../../shared/errors.ts";
import { processRuns } from "../../shared/processes.ts";
import { sleep } from "../../shared/sleep.ts";

/**
 * A private MariaDB server for one env worker: a temp data dir, a Unix socket, no TCP port, and
 * MySQL 8's defaults where MariaDB's differ (sql_mode, group_concat_max_len) with utf8mb4 and a
 * case- and accent-insensitive UCA collation, as upstream's `mysql:8` container has. Used when
 * AGENTRL_MYSQL_URL names no server. A worker killed with SIGKILL cannot stop its server, so each
 * start first sweeps servers whose owner process is gone.
 */

const DIR_PREFIX = "agentrl-mariadb-";
/** MySQL 8.0's default sql_mode. */
export const MYSQL8_SQL_MODE =
  "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION";

export interface PrivateServer {
  /** `mysql://root@localhost/?socket=...`, what AGENTRL_MYSQL_URL would hold. */
  readonly url: string;
  readonly dataDir: string;
  stop(): void;
}

function findBinary(names: readonly string[]): string | undefined {
  const dirs = [...(process.env.PATH ?? "").split(":"), "/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin"];
  for (const name of names)
    for (const dir of dirs) {
      const path = join(dir, name);
      if (dir && existsSync(path)) return path;
    }
  return undefined;
}

/** Kills and removes private servers whose owning worker is gone (it was killed before it could). */
export function sweepOrphanServers(root = tmpdir()): number {
  let swept = 0;
  for (const name of readdirSync(root)) {
    if (!name.startsWith(DIR_PREFIX)) continue;
    const dir = join(root, name);
    const owner = Number(readFileOr(join(dir, "owner.pid")));
    if (Number.isInteger(owner) && owner > 0 && processRuns(owner)) continue;
    const serverPid = Number(readFileOr(join(dir, "server.pid")));
    if (Number.isInteger(serverPid) && serverPid > 0 && processRuns(serverPid)) {
      try {
        process.kill(serverPid, "SIGKILL");
      } catch {
        // gone between the check and the kill
      }
    }
    rmSync(dir, { recursive: true, force: true });
    swept++;
  }
  return swept;
}

function readFileOr(path: string): string {
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return "";
  }
}

/** The message for a machine with no server binary and no AGENTRL_MYSQL_URL. */
export const NO_SERVER_MESSAGE =
  "the dbbench tasks need a MySQL-compatible server: set AGENTRL_MYSQL_URL (e.g. mysql://root:pw@127.0.0.1:3306/ for Docker's mysql:8) " +
  "or install MariaDB so a private server can start (Debian: apt-get install mariadb-server)";

/**
 * Whether a server accepts connections on the Unix socket at `path`. The socket file appears before
 * the server listens on it: a client connecting in between is refused (ECONNREFUSED).
 */
export function acceptsConnections(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createConnection({ path });
    probe.once("connect", () => {
      probe.destroy();
      resolve(true);
    });
    probe.once("error", () => resolve(false));
  });
}

/** Starts a private server and waits until it accepts connections on its socket. */
export async function startPrivateServer(options: { readonly timeoutMs?: number } = {}): Promise<PrivateServer> {
  const server = findBinary(["mariadbd", "mysqld"]);
  const installDb = findBinary(["mariadb-install-db", "mysql_install_db"]);
  if (!server || !installDb) throw new AgentRlError(NO_SERVER_MESSAGE);
  sweepOrphanServers();
  const dataDir = mkdtempSync(join(tmpdir(), DIR_PREFIX));
  writeFileSync(join(dataDir, "owner.pid"), String(process.pid));
  const socket = join(dataDir, "mysqld.sock");
  const asRoot = process.getuid?.() === 0 ? ["--user=root"] : [];
  try {
    execFileSync(
      installDb,
      [
        "--no-defaults",
        `--datadir=${join(dataDir, "data")}`,
        "--auth-root-authentication-method=normal",
        "--skip-test-db",
        ...asRoot,
      ],
      { stdio: "pipe", timeout: 120_000 },
    );
  } catch (error) {
    rmSync(dataDir, { recursive: true, force: true });
    const stderr = (error as { stderr?: Buffer }).stderr?.toString().trim().split("\n").slice(-3).join(" ") ?? "";
    throw new AgentRlError(`${installDb} failed to create a data dir: ${stderr || String(error)}`);
  }
  const child: ChildProcess = spawn(
    server,
    [
      "--no-defaults",
      `--datadir=${join(dataDir, "data")}`,
      `--socket=${socket}`,
      "--skip-networking",
      `--pid-file=${join(dataDir, "mysqld.pid")}`,
      `--log-error=${join(dataDir, "error.log")}`,
      "--character-set-server=utf8mb4",
      "--collation-server=utf8mb4_uca1400_ai_ci",
      `--sql-mode=${MYSQL8_SQL_MODE}`,
      "--group-concat-max-len=1024",
      "--skip-log-bin",
      "--innodb-buffer-pool-size=64M",
      "--max-connections=1000",
      ...asRoot,
    ],
    { stdio: "ignore" },
  );
  writeFileSync(join(dataDir, "server.pid"), String(child.pid));
  let exited = false;
  child.once("exit", () => {
    exited = true;
  });
  const stop = () => {
    if (!exited) child.kill("SIGKILL");
    rmSync(dataDir, { recursive: true, force: true });
  };
  // Leave no server behind on a normal exit; SIGKILL of the worker is the sweep's case.
  process.once("exit", stop);
  const deadline = Date.now() + (options.timeoutMs ?? 60_000);
  while (!(existsSync(socket) && (await acceptsConnections(socket)))) {
    if (exited || Date.now() > deadline) {
      const log = readFileOr(join(dataDir, "error.log")).split("\n").slice(-5).join("\n");
      stop();
      throw new AgentRlError(
        `the private MariaDB server did not start (${exited ? "it exited" : "timed out"}):\n${log}`,
      );
    }
    await sleep(50);
  }
  return { url: `mysql://root@localhost/?socket=${encodeURIComponent(socket)}`, dataDir, stop };
}
