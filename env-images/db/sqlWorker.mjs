// SQLite (sql.js, wasm) in a worker thread, so that the host can stop a runaway statement by
// terminating the thread: SQLite itself offers no statement timeout here, and a synchronous native
// driver (the local transport's libsql) cannot be interrupted at all. Plain JavaScript because
// worker threads do not inherit the tsx loader that runs the rest of the project; the host
// validates every reply with zod (engine.ts).
import { parentPort } from "node:worker_threads";
import initSqlJs from "sql.js";

const SQL = await initSqlJs();
/** The one database this worker holds (one episode at a time). */
let db = null;

function totalChanges() {
  return db.exec("SELECT total_changes()")[0].values[0][0];
}

/** Bytes a cell takes in a reply (UTF-8 for text). */
function cellBytes(value) {
  if (typeof value === "string") return Buffer.byteLength(value);
  if (value instanceof Uint8Array) return value.byteLength;
  return 8;
}

/** The cell cut to at most `limit` bytes (a copy, so the full value can be freed), or itself. */
function capCell(value, limit) {
  if (value instanceof Uint8Array) return value.byteLength > limit ? value.slice(0, limit) : value;
  if (typeof value !== "string" || value.length * 3 <= limit || Buffer.byteLength(value) <= limit) return value;
  // Through a Buffer, so the result is a fresh string (a plain slice may keep the whole value
  // alive) and a character split at the limit is dropped, not half-kept.
  const cut = Buffer.from(value.slice(0, limit)).subarray(0, limit).toString();
  return cut.endsWith("\uFFFD") ? cut.slice(0, -1) : cut;
}

function run(message) {
  switch (message.op) {
    case "reset": {
      db?.close();
      db = new SQL.Database();
      db.exec(message.sql);
      return { results: [], changes: 0 };
    }
    case "exec": {
      if (!db) throw new Error("no database is open");
      // Step through every row but keep only the first maxRows: a huge result is counted, not
      // copied to the host.
      const results = [];
      // sqlite3_changes() keeps the last DML count across DDL statements, so count by difference.
      const before = totalChanges();
      for (const statement of db.iterateStatements(message.sql)) {
        try {
          const columns = statement.getColumnNames();
          const values = [];
          let total = 0;
          let truncatedCells = 0;
          let keptBytes = 0;
          let byteLimited = false;
          while (statement.step()) {
            total += 1;
            if (values.length >= message.maxRows || byteLimited) continue;
            // Cap here, in the SQL thread: a huge cell is cut before it is kept or posted to the
            // host, so only one row of full-size values is alive at a time.
            const full = statement.get();
            const row = full.map((value) => capCell(value, message.maxCellBytes));
            const bytes = row.reduce((sum, value) => sum + cellBytes(value), 0);
            if (keptBytes + bytes > message.maxResultBytes) {
              byteLimited = true;
              continue;
            }
            keptBytes += bytes;
            truncatedCells += row.filter((value, i) => value !== full[i]).length;
            values.push(row);
          }
          if (columns.length > 0) results.push({ columns, values, total, truncatedCells, byteLimited });
        } finally {
          statement.free();
        }
      }
      return { results, changes: totalChanges() - before };
    }
    case "close": {
      db?.close();
      db = null;
      return { results: [], changes: 0 };
    }
    default:
      throw new Error(`unknown op ${String(message.op)}`);
  }
}

parentPort.on("message", (message) => {
  try {
    parentPort.postMessage({ id: message.id, ok: true, ...run(message) });
  } catch (error) {
    parentPort.postMessage({
      id: message.id,
      ok: false,
      error: error instanceof Error ? error.message : String(error),
    });
  }
});
parentPort.postMessage({ ready: true });
