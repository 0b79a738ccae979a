// SQLite (sql.js, wasm) in a worker thread, so that the host can stop a runaway statement by
// terminating the thread: SQLite itself offers no statement timeout here, and better-sqlite3
// cannot be interrupted at all. Plain JavaScript because worker threads do not inherit the tsx
// loader that runs the rest of the project; the host validates every reply with zod (engine.ts).
import { parentPort } from "node:worker_threads";
import initSqlJs from "sql.js";

const SQL = await initSqlJs();
/** The one database this worker holds (one episode at a time). */
let db = null;

function totalChanges() {
  return db.exec("SELECT total_changes()")[0].values[0][0];
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
          while (statement.step()) {
            total += 1;
            if (values.length < message.maxRows) values.push(statement.get());
          }
          if (columns.length > 0) results.push({ columns, values, total });
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
