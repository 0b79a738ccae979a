import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { evalTasks } from "../../cli/launch/eval.ts";
import { categoryTablesMarkdown } from "../../cli/report/report.ts";
import { stdModule } from "../../env-images/dbbench/index.ts";
import { isMutation, loadDbbench } from "../../env-images/dbbench/instances.ts";
import { type EpisodeDatabase, MysqlHost, type StatementLimits } from "../../env-images/dbbench/mysql.ts";
import { type PrivateServer, startPrivateServer, sweepOrphanServers } from "../../env-images/dbbench/privateServer.ts";
import { compareResults, hashFromPrinted } from "../../env-images/dbbench/scorer.ts";
import { createDbbenchTask, DBBENCH_SYSTEM_PROMPT, type HostProvider } from "../../env-images/dbbench/task.ts";
import { startController } from "../../functions/controller/controller.ts";
import { evaluate } from "../../functions/evaluator/evaluate.ts";
import { serveTask } from "../../shared/env/worker.ts";
import { call, jsonRecord, postJson, waitFor } from "../env/helpers.ts";
import { scriptedPolicyServer } from "../support/scriptedPolicy.ts";
import { agentBenchMissing, mysqlMissing, requireOrSkip } from "./support.ts";

/**
 * DBBench against a real server: a private MariaDB (or AGENTRL_MYSQL_URL's server) with the
 * published instances. Gold answers, observations, hostile SQL, cleanup after cancel and kill,
 * and an episode through the controller on the raw AgentRL protocol.
 */
const ready = requireOrSkip("dbbench.test.ts", "DBBench on a real MySQL-compatible server", [
  ...agentBenchMissing(),
  ...mysqlMissing(),
]);

const LIMITS: StatementLimits = { timeoutMs: 1_500, maxRows: 2_000, maxBytes: 4 * 1024 * 1024 };

/**
 * Mutation instances whose gold statement does not reproduce `answer_md5` under MySQL 8's default
 * sql_mode; the README explains each. Any change to this set is a change in fidelity.
 */
const KNOWN_GOLD_MISSES = { "dbbench-std": [225, 278, 295], "dbbench-dev": [] as number[] };

let server: PrivateServer | undefined;
let url = "";
let host: MysqlHost;
const provider: HostProvider = { get: async () => host, close: async () => undefined };

beforeAll(async () => {
  if (!ready) return;
  if (process.env.AGENTRL_MYSQL_URL) url = process.env.AGENTRL_MYSQL_URL;
  else {
    server = await startPrivateServer();
    url = server.url;
  }
  host = await MysqlHost.open(url);
}, 120_000);

afterAll(async () => {
  await host?.close();
  server?.stop();
});

async function episodeFor(rows: string[][], columns = ["name", "score"]): Promise<EpisodeDatabase> {
  return host.createEpisode([{ name: "t", columns, rows }]);
}

describe.skipIf(!ready)("DBBench on a real MySQL-compatible server", () => {
  it.each(["dbbench-std", "dbbench-dev"] as const)(
    "%s: every mutation's gold statement reproduces answer_md5, except the known misses",
    async (split) => {
      const misses: number[] = [];
      const mutations = loadDbbench(split).filter(isMutation);
      expect(mutations.length).toBe(split === "dbbench-std" ? 200 : 40);
      for (const instance of mutations) {
        const db = await host.createEpisode(instance.tables);
        try {
          await db.execute(instance.label[0]!, { ...LIMITS, timeoutMs: 10_000 });
          const hashes: string[] = [];
          for (const table of instance.tables)
            hashes.push(hashFromPrinted(await host.printedTableHash(db.name, table.name, table.columns)));
          if (!compareResults(hashes.sort().join("_"), instance.answerMd5!, instance.type)) misses.push(instance.index);
        } finally {
          await db.drop();
        }
      }
      expect(misses).toEqual(KNOWN_GOLD_MISSES[split]);
    },
    180_000,
  );

  it("shows results as upstream prints the connector's rows, and errors as its str(error)", async () => {
    const db = await episodeFor([
      ["Ann", "7"],
      ["it's", "2.5"],
    ]);
    try {
      expect(await db.execute("SELECT name, score FROM t ORDER BY name", LIMITS)).toBe(
        `[('Ann', '7'), ("it's", '2.5')]`,
      );
      expect(await db.execute("SELECT COUNT(*), SUM(score), 5/2, NULL, MAX(name) FROM t", LIMITS)).toBe(
        "[(2, 9.5, Decimal('2.5000'), None, \"it's\")]",
      );
      // MySQL 8's utf8mb4_0900_ai_ci: case- and accent-insensitive, and no padding.
      expect(await db.execute("SELECT name FROM t WHERE name = 'ann'", LIMITS)).toBe("[('Ann',)]");
      expect(await db.execute("SELECT name FROM t WHERE name = 'Ánn'", LIMITS)).toBe("[('Ann',)]");
      expect(await db.execute("SELECT name FROM t WHERE name = 'Ann '", LIMITS)).toBe("[]");
      expect(await db.execute("SELECT 'x' || 'y', \"x\" = 'x', 5 DIV 2", LIMITS)).toBe("[(0, 1, 2)]");
      expect(await db.execute("UPDATE t SET score = '8' WHERE name = 'Ann'", LIMITS)).toBe("[]");
      expect(await db.execute("SELECT * FROM nope", LIMITS)).toMatch(
        /^1146 \(42S02\): Table '.+\.nope' doesn't exist$/,
      );
      expect(await db.execute("SELEC 1", LIMITS)).toMatch(/^1064 \(42000\): You have an error in your SQL syntax/);
      const long = await db.execute("SELECT REPEAT('x', 2000)", LIMITS);
      expect(long).toBe(`[('${"x".repeat(797)}[TRUNCATED]`);
    } finally {
      await db.drop();
    }
  });

  it("stops a statement at its time limit, and the next statement runs untouched", async () => {
    const db = await episodeFor([["a", "1"]]);
    try {
      const started = Date.now();
      expect(await db.execute("SELECT SLEEP(30)", LIMITS)).toBe("Error: SQL execution timed out.");
      expect(Date.now() - started).toBeLessThan(15_000);
      expect(await db.execute("SELECT 1", LIMITS)).toBe("[(1,)]");
      expect(await db.execute("SELECT name FROM t", LIMITS)).toBe("[('a',)]");
    } finally {
      await db.drop();
    }
  });

  it("caps a huge result, says so, and keeps serving", async () => {
    const rows = Array.from({ length: 40 }, (_, i) => [`n${i}`, String(i)]);
    const db = await episodeFor(rows);
    try {
      const out = await db.execute("SELECT a.name, b.name, c.name FROM t a, t b, t c", LIMITS);
      expect(out).toMatch(/\[TRUNCATED\]\n\[result stopped at 2000 rows/);
      const wide = await db.execute("SELECT REPEAT('y', 1000000) FROM t a, t b", LIMITS);
      expect(wide).toMatch(/\[result stopped at 4194304 bytes/);
      expect(await db.execute("SELECT COUNT(*) FROM t", LIMITS)).toBe("[(40,)]");
    } finally {
      await db.drop();
    }
  });

  it("keeps an agent inside its own database: no other episode's data, no administration", async () => {
    const mine = await episodeFor([["mine", "1"]]);
    const theirs = await episodeFor([["secret", "2"]]);
    try {
      expect(await mine.execute(`SELECT * FROM \`${theirs.name}\`.t`, LIMITS)).toMatch(/^1142 |^1044 /);
      const visible = await mine.execute("SHOW DATABASES", LIMITS);
      expect(visible).toContain(mine.name);
      expect(visible).not.toContain(theirs.name);
      expect(visible).not.toContain("'mysql'");
      for (const sql of [
        "DROP DATABASE mysql",
        `DROP DATABASE \`${theirs.name}\``,
        "CREATE USER intruder IDENTIFIED BY 'x'",
        "GRANT ALL ON *.* TO CURRENT_USER",
        "SET GLOBAL max_connections = 1",
        "SELECT * FROM mysql.user",
        "SHUTDOWN",
        "SELECT * FROM t INTO OUTFILE '/tmp/agentrl-outfile'",
      ])
        expect(await mine.execute(sql, LIMITS), sql).toMatch(/^1\d{3} \([0-9A-Z]{5}\): .*(denied|privilege)/i);
      expect(await mine.execute("SELECT LOAD_FILE('/etc/passwd')", LIMITS)).toBe("[(None,)]");
      expect(await mine.execute("LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE t", LIMITS)).toMatch(
        /^\d+|Error|LOCAL/,
      );
      expect(await mine.execute("SELECT 1; DROP TABLE t", LIMITS)).toMatch(/^1064 /);
      expect(await theirs.execute("SELECT name FROM t", LIMITS)).toBe("[('secret',)]");
      // Dropping its own database is the agent's own loss; the episode still ends cleanly.
      expect(await mine.execute(`DROP DATABASE \`${mine.name}\``, LIMITS)).toBe("[]");
    } finally {
      await mine.drop();
      await theirs.drop();
    }
    const left = await host.databaseNames();
    expect(left).not.toContain(mine.name);
    expect(left).not.toContain(theirs.name);
  });

  it("drops the database and user when an episode ends, and a killed worker's at the next worker's start", async () => {
    const db = await episodeFor([["a", "1"]]);
    expect(await host.databaseNames()).toContain(db.name);
    await db.drop();
    await db.drop(); // idempotent
    expect(await host.databaseNames()).not.toContain(db.name);

    const child = spawn(process.execPath, ["--import", "tsx", "test/agentbench/fixtures/holdEpisode.ts", url], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const line = await new Promise<string>((resolve, reject) => {
      child.stdout.setEncoding("utf8").once("data", resolve);
      child.once("exit", (code) => reject(new Error(`holdEpisode exited ${code}`)));
    });
    const orphan = (JSON.parse(line) as { database: string }).database;
    expect(await host.databaseNames()).toContain(orphan);
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
    // The server notices the dead connection (its lock frees) within moments; the next worker sweeps.
    await waitFor(
      async () => {
        const next = await MysqlHost.open(url);
        await next.close();
        return !(await host.databaseNames()).includes(orphan);
      },
      20_000,
      "the killed worker's database to be swept",
      500,
    );
    expect(await host.userNames()).not.toContain(orphan);
    // A live worker's databases are never swept.
    const live = await episodeFor([["b", "2"]]);
    await (await MysqlHost.open(url)).close();
    expect(await host.databaseNames()).toContain(live.name);
    await live.drop();
  }, 60_000);

  it("kills and removes a private server whose worker was killed", async () => {
    const child = spawn(process.execPath, ["--import", "tsx", "test/agentbench/fixtures/holdEpisode.ts", "--private"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const line = await new Promise<string>((resolve, reject) => {
      child.stdout.setEncoding("utf8").once("data", resolve);
      child.once("exit", (code) => reject(new Error(`holdEpisode exited ${code}`)));
    });
    const { dataDir } = JSON.parse(line) as { dataDir: string };
    expect(existsSync(dataDir)).toBe(true);
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
    expect(sweepOrphanServers()).toBeGreaterThanOrEqual(1);
    expect(existsSync(dataDir)).toBe(false);
  }, 60_000);

  it("plays an episode end to end through the controller on the raw AgentRL protocol", async () => {
    const controller = await startController({ port: 0, heartbeatTimeoutMs: 2_000 });
    const task = createDbbenchTask("dbbench-std", { host: provider, statementLimits: LIMITS });
    const worker = await serveTask(
      { ...stdModule, task },
      { controllerUrl: controller.url, concurrency: 4, heartbeatMs: 200 },
    );
    const api = `${controller.url}/api`;
    try {
      await waitFor(async () => (await fetch(`${api}/list_workers`)).ok, 10_000, "the worker");
      const instances = loadDbbench("dbbench-std");
      const select = instances.find((i) => !isMutation(i))!;
      const before = (await host.databaseNames()).length;

      const start = await postJson(`${api}/start_sample`, { name: "dbbench-std", index: select.index });
      expect(start.status).toBe(200);
      const session = start.headers.get("session_id")!;
      const opening = await jsonRecord(start);
      expect(opening.messages).toEqual([
        { role: "system", content: DBBENCH_SYSTEM_PROMPT },
        {
          role: "user",
          content: expect.stringMatching(/^Additional table information about the question: .*\nQuestion: .*\n$/s),
        },
      ]);
      const tools = (opening.tools as Array<{ function: { name: string } }>).map((t) => t.function.name);
      expect(tools).toEqual(["execute_sql", "commit_final_answer"]);
      expect((await host.databaseNames()).length).toBe(before + 1);

      const headers = { session_id: session };
      const table = select.tables[0]!;
      const explored = await jsonRecord(
        await postJson(
          `${api}/interact`,
          { messages: [call("execute_sql", { query: `SELECT COUNT(*) FROM \`${table.name}\`` })] },
          headers,
        ),
      );
      expect(explored).toMatchObject({ status: "running", finish: false });
      expect((explored.messages as Array<{ content: string }>)[0]!.content).toBe(`[(${table.rows.length},)]`);
      // A turn without a tool call is answered as upstream answers it, and the episode goes on.
      const chatty = await jsonRecord(
        await postJson(`${api}/interact`, { messages: [{ role: "assistant", content: "Let me think." }] }, headers),
      );
      expect(chatty).toMatchObject({
        status: "running",
        messages: [{ role: "user", content: "Internal error: No tool calls found despite finish reason." }],
      });
      // Malformed and oversized calls are answered, and the episode goes on (as upstream).
      const malformed = await jsonRecord(
        await postJson(`${api}/interact`, { messages: [call("execute_sql", "{not json")] }, headers),
      );
      expect(malformed).toMatchObject({
        status: "running",
        messages: [{ role: "tool", content: "Error: Failed to parse tool call. Tool call format is incorrect." }],
      });
      const oversized = await jsonRecord(
        await postJson(
          `${api}/interact`,
          { messages: [call("execute_sql", { query: `SELECT '${"x".repeat(20_000)}'` })] },
          headers,
        ),
      );
      expect(oversized).toMatchObject({ status: "running" });
      expect((oversized.messages as Array<{ content: string }>)[0]!.content).toMatch(
        /invalid arguments for execute_sql: query/,
      );
      const unknown = await jsonRecord(
        await postJson(`${api}/interact`, { messages: [call("drop_everything", {})] }, headers),
      );
      expect(unknown).toMatchObject({
        status: "running",
        messages: [{ role: "tool", content: "Invalid function call. Please call a tool instead." }],
      });
      const done = await jsonRecord(
        await postJson(
          `${api}/interact`,
          { messages: [call("commit_final_answer", { answers: select.label })] },
          headers,
        ),
      );
      expect(done).toMatchObject({ status: "completed", finish: true, reward: 1 });
      await waitFor(async () => (await host.databaseNames()).length === before, 5_000, "the episode's database to go");

      // A mutation: the gold statement, then any commit; and a cancelled episode leaves nothing.
      const mutation = instances.find((i) => i.type === "INSERT")!;
      const second = await postJson(`${api}/start_sample`, { name: "dbbench-std", index: mutation.index });
      const h2 = { session_id: second.headers.get("session_id")! };
      await postJson(`${api}/interact`, { messages: [call("execute_sql", { query: mutation.label[0]! })] }, h2);
      const committed = await jsonRecord(
        await postJson(`${api}/interact`, { messages: [call("commit_final_answer", { answers: ["anything"] })] }, h2),
      );
      expect(committed).toMatchObject({ status: "completed", reward: 1 });

      const third = await postJson(`${api}/start_sample`, { name: "dbbench-std", index: mutation.index });
      const h3 = { session_id: third.headers.get("session_id")! };
      expect((await host.databaseNames()).length).toBe(before + 1);
      expect((await postJson(`${api}/cancel`, {}, h3)).status).toBe(200);
      await waitFor(
        async () => (await host.databaseNames()).length === before,
        5_000,
        "the cancelled episode's database to go",
      );

      // Fifteen rounds without a commit: task limit reached, reward 0.
      const fourth = await postJson(`${api}/start_sample`, { name: "dbbench-std", index: select.index });
      const h4 = { session_id: fourth.headers.get("session_id")! };
      let last: Record<string, unknown> = {};
      for (let round = 0; round < 15; round++)
        last = await jsonRecord(
          await postJson(`${api}/interact`, { messages: [call("execute_sql", { query: "SELECT 1" })] }, h4),
        );
      expect(last).toMatchObject({ status: "task limit reached", finish: true, reward: 0 });
    } finally {
      await worker.close();
      await controller.close();
    }
  }, 60_000);
});

describe.skipIf(!ready)("dbbench-std's scripted agents", () => {
  it("the gold expert solves every instance but the known misses", async () => {
    const { scriptedStats } = await import("../../shared/env/session.ts");
    const task = createDbbenchTask("dbbench-std", { host: provider });
    const indices = Array.from({ length: 300 }, (_, i) => i);
    const expert = await scriptedStats(task, stdModule.expert, indices);
    expect(expert.misses.map((m) => m.index)).toEqual(KNOWN_GOLD_MISSES["dbbench-std"]);
    expect(expert.successRate).toBeGreaterThanOrEqual(0.97);
  }, 180_000);

  it("dbbench-synth: truths come from the reference statement on the server, and the expert solves every instance", async () => {
    const { scriptedStats } = await import("../../shared/env/session.ts");
    const { synthModule } = await import("../../env-images/dbbench/index.ts");
    const task = createDbbenchTask("dbbench-synth", { host: provider });
    const indices = Array.from({ length: 60 }, (_, i) => i);
    const expert = await scriptedStats(task, synthModule.expert, indices);
    expect(expert.misses).toEqual([]);
    const random = await scriptedStats(task, synthModule.random, indices);
    expect(random.successRate).toBeLessThan(0.3);
    expect((await host.databaseNames()).filter((name) => name.includes(host.workerId))).toEqual([]);
  }, 120_000);

  it("dbbench-dev: the one instance MySQL cannot create (an empty column name) is a task error, as upstream", async () => {
    const { scriptedStats } = await import("../../shared/env/session.ts");
    const { devModule } = await import("../../env-images/dbbench/index.ts");
    const task = createDbbenchTask("dbbench-dev", { host: provider });
    const expert = await scriptedStats(
      task,
      devModule.expert,
      Array.from({ length: 60 }, (_, i) => i),
    );
    expect(expert.misses).toEqual([
      {
        index: 5,
        status: "task error",
        reward: 0,
        lastObservations: [expect.stringMatching(/Incorrect column name ''/)],
      },
    ]);
    expect(expert.successes).toBe(59);
  }, 120_000);
});

describe.skipIf(!ready)("agentrl eval on dbbench-std", () => {
  it("reports success per question type beside the total, as AgentBench does", async () => {
    const controller = await startController({ port: 0, heartbeatTimeoutMs: 2_000 });
    const task = createDbbenchTask("dbbench-std", { host: provider, statementLimits: LIMITS });
    const worker = await serveTask(
      { ...stdModule, task },
      { controllerUrl: controller.url, concurrency: 8, heartbeatMs: 200 },
    );
    // The evaluator seeds each greedy episode with its index, which is how the scripted policy knows it.
    const policy = await scriptedPolicyServer(stdModule.expert);
    try {
      await worker.heartbeat();
      const [all] = await evalTasks(["dbbench-std"], "test", 300);
      // Two instances of every question type, and the three known misses (all UPDATE).
      const byType = new Map<string, number[]>();
      for (const index of all!.indices)
        byType.set(all!.categories![index]!, [...(byType.get(all!.categories![index]!) ?? []), index]);
      const indices = [...[...byType.values()].flatMap((ids) => ids.slice(0, 2)), ...KNOWN_GOLD_MISSES["dbbench-std"]];
      expect(byType.size).toBe(10);
      const report = await evaluate({
        controllerUrl: controller.url,
        policy: { url: `${policy.server.url}/v1` },
        policyLabel: "gold",
        tasks: [{ ...all!, indices }],
        split: "test",
        concurrency: 4,
        maxTokensPerTurn: 256,
      });
      const row = report.tasks[0]!;
      expect(row.episodes).toBe(23);
      expect(row.categories?.UPDATE).toEqual({ episodes: 5, success: 0.4 });
      expect(row.categories?.INSERT).toEqual({ episodes: 2, success: 1 });
      expect(row.categories?.counting).toEqual({ episodes: 2, success: 1 });
      expect(row.success).toBeCloseTo(20 / 23, 6);
      const table = categoryTablesMarkdown([report]);
      expect(table).toContain("| dbbench-std: success % (episodes) | INSERT | UPDATE | aggregation-AVG |");
      expect(table).toContain("| gold | 100.0 (2) | 40.0 (5) |");
      expect(table).toMatch(/\| 87\.0 \(23\) \|$/);
    } finally {
      await policy.server.close();
      await worker.close();
      await controller.close();
    }
  }, 120_000);
});
