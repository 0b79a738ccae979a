import { randomBytes } from "node:crypto";
import mysql, { type Connection, type ConnectionOptions, type FieldPacket, type Pool } from "mysql2";
import { AgentRlError } from "../../shared/errors.ts";
import { pyFloatRepr, pyStrRepr } from "./python.ts";

/**
 * The MySQL side of DBBench: one server per env worker (AGENTRL_MYSQL_URL, or a private MariaDB),
 * one database and one user per episode. The episode's user is granted its own database only, so
 * an agent reaches no other episode's data and no administration (no FILE, PROCESS, SUPER or
 * user management). Names carry the worker's id, and the worker holds a named lock for its
 * lifetime: a later worker drops the databases and users of any worker whose lock is free, i.e.
 * whose connection died with it.
 */

export const NAME_PREFIX = "agentrl_";
const LOCK_PREFIX = "agentrl_worker_";
export const MYSQL_URL_ENV = "AGENTRL_MYSQL_URL";
export const MYSQL_PASSWORD_ENV = "AGENTRL_MYSQL_PASSWORD";

/** Limits on one agent statement. */
export interface StatementLimits {
  /** Upstream waits 60 s before answering `Error: SQL execution timed out.` */
  readonly timeoutMs: number;
  /** Rows read before the worker stops the statement (the agent sees 800 characters of them anyway). */
  readonly maxRows: number;
  /** Bytes of cell data read before the worker stops the statement. */
  readonly maxBytes: number;
}

export const DEFAULT_STATEMENT_LIMITS: StatementLimits = {
  timeoutMs: 60_000,
  maxRows: 10_000,
  maxBytes: 16 * 1024 * 1024,
};

/** MySQL 8's default collation, which upstream's `mysql:8` gives every TEXT column. */
export const MYSQL8_COLLATION = "utf8mb4_0900_ai_ci";
/**
 * MariaDB's nearest: a UCA collation, accent- and case-insensitive like MySQL's, and NO PAD like it
 * (MariaDB's utf8mb4 default, utf8mb4_general_ci, would find 'Ann' for 'Ann ').
 */
export const MARIADB_COLLATION = "utf8mb4_uca1400_nopad_ai_ci";

/** Upstream cuts the printed result here and appends `[TRUNCATED]`. */
export const OBSERVATION_CHARS = 800;

/** `mysql://user:password@host:port/` or `mysql://user@localhost/?socket=/path/to.sock`. */
export function connectionOptionsFromUrl(url: string): ConnectionOptions {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new AgentRlError(`${MYSQL_URL_ENV} is not a URL: expected mysql://user:password@host:port/`);
  }
  if (parsed.protocol !== "mysql:")
    throw new AgentRlError(`${MYSQL_URL_ENV} must start with mysql:// (got ${parsed.protocol}//)`);
  const socketPath = parsed.searchParams.get("socket") ?? undefined;
  return {
    user: decodeURIComponent(parsed.username || "root"),
    // A password kept out of the URL comes from its own variable (ECS injects it from Secrets Manager).
    password: decodeURIComponent(parsed.password) || process.env[MYSQL_PASSWORD_ENV] || "",
    ...(socketPath ? { socketPath } : { host: parsed.hostname || "127.0.0.1", port: Number(parsed.port || 3306) }),
  };
}

const quoteId = (name: string): string => `\`${name.replaceAll("`", "``")}\``;

/** A Python value's text, as mysql-connector-python would hand the cell to `str()`. */
function renderCell(raw: Buffer | null, field: FieldPacket): string {
  if (raw === null) return "None";
  const text = raw.toString("utf8");
  const type = (field as FieldPacket & { columnType?: number }).columnType ?? field.type ?? 0;
  const binary = (field as FieldPacket & { characterSet?: number }).characterSet === 63;
  switch (type) {
    case 1: // TINY
    case 2: // SHORT
    case 3: // LONG
    case 8: // LONGLONG
    case 9: // INT24
    case 13: // YEAR
      return text;
    case 4: // FLOAT
    case 5: // DOUBLE
      return pyFloatRepr(Number(text));
    case 0: // DECIMAL
    case 246: // NEWDECIMAL
      return `Decimal(${pyStrRepr(text)})`;
    case 10: // DATE
      return dateRepr(text);
    case 7: // TIMESTAMP
    case 12: // DATETIME
      return dateTimeRepr(text);
    case 11: // TIME
      return timeDeltaRepr(text);
    case 16: // BIT
      return BigInt(`0x${raw.toString("hex") || "0"}`).toString();
    default:
      return binary && type !== 245 ? bytesRepr(raw) : pyStrRepr(text);
  }
}

function dateRepr(text: string): string {
  const [y, m, d] = text.split("-").map(Number);
  if (!y || !m || !d) return "None"; // zero dates read as None in the connector
  return `datetime.date(${y}, ${m}, ${d})`;
}

function dateTimeRepr(text: string): string {
  const match = /^(\d+)-(\d+)-(\d+)[ T](\d+):(\d+):(\d+)(?:\.(\d+))?$/.exec(text);
  if (!match || Number(match[1]) === 0) return "None";
  const [y, mo, d, h, mi, s] = match.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const micro = match[7] ? Number(match[7].padEnd(6, "0").slice(0, 6)) : 0;
  const parts = [y, mo, d, h, mi];
  if (s || micro) parts.push(s);
  if (micro) parts.push(micro);
  return `datetime.datetime(${parts.join(", ")})`;
}

function timeDeltaRepr(text: string): string {
  const match = /^(-?)(\d+):(\d+):(\d+)(?:\.(\d+))?$/.exec(text);
  if (!match) return pyStrRepr(text);
  const sign = match[1] === "-" ? -1 : 1;
  const micro = match[5] ? Number(match[5].padEnd(6, "0").slice(0, 6)) : 0;
  const totalMicro = sign * ((Number(match[2]) * 3600 + Number(match[3]) * 60 + Number(match[4])) * 1e6 + micro);
  const days = Math.floor(totalMicro / 86_400e6);
  const rest = totalMicro - days * 86_400e6;
  const seconds = Math.floor(rest / 1e6);
  const micros = Math.round(rest - seconds * 1e6);
  const parts: string[] = [];
  if (days) parts.push(`days=${days}`);
  if (seconds) parts.push(`seconds=${seconds}`);
  if (micros) parts.push(`microseconds=${micros}`);
  return `datetime.timedelta(${parts.join(", ") || "0"})`;
}

function bytesRepr(raw: Buffer): string {
  let out = "";
  for (const byte of raw) {
    if (byte === 0x5c) out += "\\\\";
    else if (byte === 0x27) out += "\\'";
    else if (byte === 0x0a) out += "\\n";
    else if (byte === 0x0d) out += "\\r";
    else if (byte === 0x09) out += "\\t";
    else if (byte < 0x20 || byte >= 0x7f) out += `\\x${byte.toString(16).padStart(2, "0")}`;
    else out += String.fromCharCode(byte);
  }
  return `b'${out}'`;
}

function rowRepr(cells: readonly string[]): string {
  return cells.length === 1 ? `(${cells[0]},)` : `(${cells.join(", ")})`;
}

/** Python's `s[:800] + "[TRUNCATED]"`, counted in code points as Python counts. */
export function truncateObservation(text: string): string {
  if (text.length <= OBSERVATION_CHARS) return text;
  const points = Array.from(text);
  return points.length <= OBSERVATION_CHARS ? text : `${points.slice(0, OBSERVATION_CHARS).join("")}[TRUNCATED]`;
}

/** What mysql-connector-python's `str(error)` prints: `1146 (42S02): Table ... doesn't exist`. */
function errorText(error: unknown): string {
  const e = error as { errno?: number; sqlState?: string; sqlMessage?: string; message?: string };
  if (e.errno !== undefined && e.sqlMessage !== undefined)
    return e.sqlState ? `${e.errno} (${e.sqlState}): ${e.sqlMessage}` : `${e.errno}: ${e.sqlMessage}`;
  return e.message ?? String(error);
}

function connect(options: ConnectionOptions): Promise<Connection> {
  return new Promise((resolve, reject) => {
    const connection = mysql.createConnection({
      ...options,
      // A LOAD DATA LOCAL would have the worker read its own files for the agent.
      flags: ["-LOCAL_FILES", "-MULTI_STATEMENTS"],
      multipleStatements: false,
      charset: "utf8mb4_general_ci",
      connectTimeout: 10_000,
    });
    connection.once("connect", () => resolve(connection));
    connection.once("error", reject);
  });
}

function run(connection: Connection | Pool, sql: string, values?: unknown[]): Promise<unknown[]> {
  return new Promise((resolve, reject) => {
    connection.query({ sql, values, rowsAsArray: true }, (error, rows) => {
      if (error) reject(error);
      else resolve(Array.isArray(rows) ? rows : []);
    });
  });
}

/** One column of an instance's table; upstream creates every column as TEXT. */
export interface TableSpec {
  readonly name: string;
  readonly columns: readonly string[];
  /** Cells as Python's `str()` of the JSON value. */
  readonly rows: readonly (readonly string[])[];
}

/** One worker's connection to its server. */
export class MysqlHost {
  private sequence = 0;
  private readonly live = new Set<EpisodeDatabase>();

  private constructor(
    private readonly options: ConnectionOptions,
    private readonly admin: Pool,
    private readonly lock: Connection,
    readonly workerId: string,
    /** The episodes' collation: MySQL 8's default, or MariaDB's nearest (UCA, accent- and case-insensitive, no pad). */
    readonly collation: string,
  ) {}

  /** Connects, takes this worker's lock and sweeps the databases of workers that are gone. */
  static async open(url: string): Promise<MysqlHost> {
    const options = connectionOptionsFromUrl(url);
    let lock: Connection;
    try {
      lock = await connect(options);
    } catch (error) {
      throw new AgentRlError(`cannot connect to the MySQL server at ${describe(options)}: ${errorText(error)}`);
    }
    lock.on("error", () => undefined); // a dead lock connection is found by the sweep of the next worker
    const workerId = randomBytes(4).toString("hex");
    await run(lock, "SELECT GET_LOCK(?, 0)", [`${LOCK_PREFIX}${workerId}`]);
    const admin = mysql.createPool({
      ...options,
      flags: ["-LOCAL_FILES"],
      charset: "utf8mb4_general_ci",
      connectionLimit: 4,
    });
    admin.on("connection", (connection) => {
      // MySQL 8's default, whatever the server's: the table hash depends on it.
      connection.query("SET SESSION group_concat_max_len = 1024");
    });
    const [[version]] = (await run(admin, "SELECT VERSION()")) as [[string]];
    const collation = /mariadb/i.test(version) ? MARIADB_COLLATION : MYSQL8_COLLATION;
    const host = new MysqlHost(options, admin, lock, workerId, collation);
    await host.sweepOrphans();
    return host;
  }

  /** Drops databases and users left by workers whose lock is free (crashed or killed). */
  async sweepOrphans(): Promise<number> {
    const owners = new Set<string>();
    const databases = await this.databaseNames();
    // Reading mysql.user needs a privilege a managed server's admin user may lack: then users stay.
    const users = await this.userNames().catch(() => []);
    for (const name of [...databases, ...users]) {
      const owner = /^agentrl_([0-9a-f]{8})_\d+$/.exec(name)?.[1];
      if (owner && owner !== this.workerId) owners.add(owner);
    }
    const dead = new Set<string>();
    for (const owner of owners) {
      const [[holder]] = (await run(this.admin, "SELECT IS_USED_LOCK(?)", [`${LOCK_PREFIX}${owner}`])) as [[unknown]];
      if (holder === null) dead.add(owner);
    }
    let dropped = 0;
    for (const name of databases) {
      const owner = /^agentrl_([0-9a-f]{8})_\d+$/.exec(name)?.[1];
      if (owner && dead.has(owner)) {
        await run(this.admin, `DROP DATABASE IF EXISTS ${quoteId(name)}`);
        dropped++;
      }
    }
    for (const name of users) {
      const owner = /^agentrl_([0-9a-f]{8})_\d+$/.exec(name)?.[1];
      if (owner && dead.has(owner)) await run(this.admin, "DROP USER IF EXISTS ?@'%'", [name]);
    }
    return dropped;
  }

  /** Creates an episode's database, its user and its tables (every column TEXT, as upstream). */
  async createEpisode(tables: readonly TableSpec[]): Promise<EpisodeDatabase> {
    const name = `${NAME_PREFIX}${this.workerId}_${++this.sequence}`;
    const password = randomBytes(18).toString("base64url");
    await run(this.admin, `CREATE DATABASE ${quoteId(name)} CHARACTER SET utf8mb4 COLLATE ${this.collation}`);
    try {
      await run(this.admin, "CREATE USER ?@'%' IDENTIFIED BY ? WITH MAX_USER_CONNECTIONS 2", [name, password]);
      await run(this.admin, `GRANT ALL PRIVILEGES ON ${quoteId(name)}.* TO ?@'%'`, [name]);
      const connection = await connect({ ...this.options, user: name, password, database: name });
      connection.on("error", () => undefined); // surfaced by the next statement instead
      await run(connection, `SET NAMES utf8mb4 COLLATE ${this.collation}`);
      const episode = new EpisodeDatabase(this, name, connection);
      this.live.add(episode);
      for (const table of tables) {
        const columns = table.columns.map((c) => `${quoteId(c)} TEXT`).join(",");
        await run(connection, `CREATE TABLE IF NOT EXISTS ${quoteId(table.name)} (${columns})`);
        if (table.rows.length === 0) continue;
        const placeholders = table.rows.map((row) => `(${row.map(() => "?").join(",")})`).join(",");
        await run(
          connection,
          `INSERT INTO ${quoteId(table.name)} (${table.columns.map(quoteId).join(",")}) VALUES ${placeholders}`,
          table.rows.flat(),
        );
      }
      return episode;
    } catch (error) {
      await this.dropByName(name);
      throw error;
    }
  }

  /**
   * Upstream's table hash: md5 over the sorted first 5 hex digits of each row's
   * md5(concat_ws(',', cols)), printed as the connector prints it (`[('…',)]`).
   */
  async printedTableHash(database: string, table: string, columns: readonly string[]): Promise<string> {
    const sql =
      "select md5(group_concat(rowhash order by rowhash)) as hash " +
      `from( SELECT substring(MD5(CONCAT_WS(',', ${columns.map(quoteId).join(",")})), 1, 5) AS rowhash ` +
      `FROM ${quoteId(database)}.${quoteId(table)}) as sub;`;
    try {
      const rows = (await run(this.admin, sql)) as [[string | null]];
      return `[(${rows[0]?.[0] === null || rows[0] === undefined ? "None" : pyStrRepr(rows[0][0])},)]`;
    } catch (error) {
      return errorText(error);
    }
  }

  async killQuery(threadId: number): Promise<void> {
    await run(this.admin, `KILL QUERY ${Number(threadId)}`).catch(() => undefined);
  }

  async dropByName(name: string): Promise<void> {
    await run(this.admin, `DROP DATABASE IF EXISTS ${quoteId(name)}`);
    await run(this.admin, "DROP USER IF EXISTS ?@'%'", [name]);
  }

  /** Episode databases on the server, every worker's (the admin's view). */
  async databaseNames(): Promise<string[]> {
    const rows = (await run(
      this.admin,
      "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'agentrl\\_%'",
    )) as [string][];
    return rows.map(([name]) => name);
  }

  /** Episode users on the server, every worker's. */
  async userNames(): Promise<string[]> {
    const rows = (await run(this.admin, "SELECT DISTINCT User FROM mysql.user WHERE User LIKE 'agentrl\\_%'")) as [
      string,
    ][];
    return rows.map(([name]) => name);
  }

  forget(episode: EpisodeDatabase): void {
    this.live.delete(episode);
  }

  /** Databases this worker has open now (for tests and the sweep's bookkeeping). */
  get openEpisodes(): number {
    return this.live.size;
  }

  async close(): Promise<void> {
    await Promise.all([...this.live].map((episode) => episode.drop()));
    await new Promise<void>((resolve) => this.admin.end(() => resolve()));
    this.lock.destroy();
  }
}

function describe(options: ConnectionOptions): string {
  return options.socketPath ? `socket ${options.socketPath}` : `${options.host}:${options.port}`;
}

/** One episode's database, reached through its own user's connection. */
export class EpisodeDatabase {
  private dropped = false;
  private pendingKill: Promise<void> = Promise.resolve();

  constructor(
    private readonly host: MysqlHost,
    readonly name: string,
    private readonly connection: Connection,
  ) {}

  /**
   * Runs one agent statement and returns what upstream shows the agent: `str()` of the rows as a
   * list of tuples (`[]` for statements without rows), or the connector's error text, cut at 800
   * characters. The statement is killed at the time limit or when its result passes the caps.
   */
  async execute(sql: string, limits: StatementLimits, signal?: AbortSignal): Promise<string> {
    // A kill sent for the previous statement must land before this one starts, or it could stop it.
    await this.pendingKill;
    return new Promise((resolve) => {
      let fields: FieldPacket[] = [];
      let text = "[";
      let rows = 0;
      let bytes = 0;
      let stopped: "timeout" | "cap" | "cancelled" | undefined;
      const threadId = this.connection.threadId;
      const stop = (why: "timeout" | "cap" | "cancelled") => {
        if (stopped || threadId === null) return;
        stopped = why;
        this.pendingKill = this.host.killQuery(threadId);
      };
      const timer = setTimeout(() => stop("timeout"), limits.timeoutMs);
      const onAbort = () => stop("cancelled");
      signal?.addEventListener("abort", onAbort, { once: true });
      const finish = (observation: string) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        resolve(observation);
      };
      const query = this.connection.query({ sql, rowsAsArray: true, typeCast: false });
      query.on("fields", (f: FieldPacket[]) => {
        if (fields.length === 0) fields = f;
      });
      query.on("result", (row: unknown) => {
        if (!Array.isArray(row) || stopped) return;
        rows++;
        for (const cell of row) bytes += cell instanceof Buffer ? cell.length : 0;
        // Only the first 800 code points are ever shown (at most 1,600 UTF-16 units): render
        // rows until past that, then only count them.
        if (text.length <= 2 * OBSERVATION_CHARS + 16) {
          const rendered = rowRepr(row.map((cell, i) => renderCell(cell as Buffer | null, fields[i]!)));
          text += `${rows > 1 ? ", " : ""}${rendered}`;
        }
        if (rows >= limits.maxRows || bytes >= limits.maxBytes) stop("cap");
      });
      query.on("error", (error: unknown) => {
        if (stopped === "timeout") finish("Error: SQL execution timed out.");
        else if (stopped === "cancelled") finish("Error: the episode was cancelled.");
        else if (stopped === "cap") finish(capped(`${text}]`, rows, limits));
        else finish(truncateObservation(errorText(error)));
      });
      query.on("end", () => {
        if (stopped === "timeout") return finish("Error: SQL execution timed out.");
        if (stopped === "cap") return finish(capped(`${text}]`, rows, limits));
        finish(truncateObservation(`${text}]`));
      });
    });
  }

  /** Drops the database and its user; safe to call more than once. */
  async drop(): Promise<void> {
    if (this.dropped) return;
    this.dropped = true;
    this.host.forget(this);
    this.connection.destroy();
    await this.host.dropByName(this.name);
  }
}

function capped(text: string, rows: number, limits: StatementLimits): string {
  const why = rows >= limits.maxRows ? `${limits.maxRows} rows` : `${limits.maxBytes} bytes`;
  return `${truncateObservation(text)}\n[result stopped at ${why}: the worker reads no more of one statement's result]`;
}
