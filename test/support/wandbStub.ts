import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { bodyOf } from "./httpBody.ts";

/**
 * A stand-in W&B server on 127.0.0.1 for the two routes W&B's own clients use to log a run:
 * GraphQL `upsertBucket` at `/graphql` and `/files/<entity>/<project>/<run>/file_stream`. Each
 * request is checked with zod against the shapes the real client sends (wandb's
 * core/internal/filestream: `files` of `{offset, content}`, `complete`, `exitcode`; Basic auth
 * `api:<key>`) and the documented limits (about 10 MiB per file_stream request and 10 MiB - 100
 * KiB per line, as the client holds itself to; a logged value under 1 MB, W&B's "Limits &
 * performance"; run and project names without `/ \ # ? % :`; history steps increasing; history
 * lines appended at the file's end or rewritten in place, never past it). A violation is answered
 * 400 and kept in `violations`, so a test fails on it even when the sink swallows the error.
 * Not W&B: no real server was run here.
 */
const LIMITS = { requestBytes: 10 << 20, lineBytes: (10 << 20) - (100 << 10), valueBytes: 1_000_000, bins: 512 };
const HISTORY = "wandb-history.jsonl";
const SUMMARY = "wandb-summary.json";

const Name = z
  .string()
  .min(1)
  .max(128)
  .regex(/^[^/\\#?%:]+$/, "names may not contain / \\ # ? % or :");
const ConfigEntry = z.object({ value: z.unknown(), desc: z.string().nullable().optional() }).strict();
const UpsertVariables = z
  .object({
    name: Name.max(64),
    project: Name,
    entity: Name.optional(),
    displayName: z.string().max(128).optional(),
    config: z.string().optional(),
    commit: z
      .string()
      .regex(/^[0-9a-f]{7,40}$/, "a git commit")
      .optional(),
  })
  .strict();
const GraphqlRequest = z
  .object({
    query: z.string().includes("upsertBucket("),
    variables: UpsertVariables,
    operationName: z.string().optional(),
  })
  .strict();
const FileChunk = z.object({ offset: z.number().int().nonnegative(), content: z.array(z.string()) }).strict();
const FileStreamRequest = z
  .object({
    files: z.partialRecord(z.enum([HISTORY, SUMMARY, "wandb-events.jsonl", "output.log"]), FileChunk).optional(),
    complete: z.boolean().optional(),
    exitcode: z.number().int().optional(),
    preempting: z.boolean().optional(),
    uploaded: z.array(z.string()).optional(),
  })
  .strict();
const Histogram = z
  .object({ _type: z.literal("histogram"), bins: z.array(z.number()), values: z.array(z.number().int().nonnegative()) })
  .strict()
  .refine((h) => h.bins.length === h.values.length + 1, "a histogram has one more bin edge than counts")
  .refine((h) => h.values.length <= LIMITS.bins, `at most ${LIMITS.bins} bins`);
const HistoryRow = z
  .object({
    _step: z.number().int().nonnegative(),
    _timestamp: z.number().positive(),
    _runtime: z.number().nonnegative(),
  })
  .catchall(z.union([z.number(), z.string(), z.boolean(), Histogram]));

export interface StubRun {
  readonly entity: string;
  readonly project: string;
  readonly name: string;
  displayName: string | undefined;
  config: Record<string, z.infer<typeof ConfigEntry>>;
  commit: string | undefined;
  /** The history file's lines, parsed. */
  readonly history: Array<z.infer<typeof HistoryRow>>;
  summary: Record<string, unknown>;
  complete: boolean;
  exitcode: number | undefined;
  /** file_stream requests received for this run. */
  requests: number;
}

export interface WandbStub {
  readonly url: string;
  /** Runs by `entity/project/name`. */
  readonly runs: Map<string, StubRun>;
  readonly violations: string[];
  readonly authorizations: Array<string | undefined>;
  /** The next `n` requests answer 503 (a server briefly away). */
  failNext(n: number): void;
  close(): Promise<void>;
}

class Refused extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Starts the stub; `apiKey` is the one key it accepts, and `defaultEntity` the key's entity. */
export async function startWandbStub(apiKey: string, defaultEntity = "stub-user"): Promise<WandbStub> {
  const runs = new Map<string, StubRun>();
  const violations: string[] = [];
  const authorizations: Array<string | undefined> = [];
  let failing = 0;

  const check = <S extends z.ZodType>(schema: S, value: unknown, route: string): z.output<S> => {
    const parsed = schema.safeParse(value);
    if (parsed.success) return parsed.data;
    const reason = parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
    violations.push(`${route}: ${reason}`);
    throw new Refused(400, reason);
  };
  const violation = (route: string, message: string): never => {
    violations.push(`${route}: ${message}`);
    throw new Refused(400, message);
  };

  const upsert = (text: string): unknown => {
    const { variables } = check(GraphqlRequest, JSON.parse(text), "graphql");
    const entity = variables.entity ?? defaultEntity;
    const key = `${entity}/${variables.project}/${variables.name}`;
    let config: StubRun["config"] | undefined;
    if (variables.config !== undefined) {
      try {
        config = check(z.record(z.string(), ConfigEntry), JSON.parse(variables.config), "graphql config");
      } catch (error) {
        // GraphQL answers a bad argument with 200 and `errors`
        return { errors: [{ message: `config: ${error instanceof Error ? error.message : String(error)}` }] };
      }
    }
    const known = runs.get(key);
    const run: StubRun = known ?? {
      entity,
      project: variables.project,
      name: variables.name,
      displayName: undefined,
      config: {},
      commit: undefined,
      history: [],
      summary: {},
      complete: false,
      exitcode: undefined,
      requests: 0,
    };
    runs.set(key, run);
    // upserting a finished run resumes it
    run.complete = false;
    if (variables.displayName !== undefined) run.displayName = variables.displayName;
    if (config) run.config = config;
    if (variables.commit !== undefined) run.commit = variables.commit;
    return {
      data: {
        upsertBucket: {
          bucket: {
            id: Buffer.from(key).toString("base64"),
            name: run.name,
            displayName: run.displayName,
            historyLineCount: run.history.length,
            summaryMetrics: JSON.stringify(run.summary),
            project: { name: run.project, entity: { name: run.entity } },
          },
          inserted: !known,
        },
      },
    };
  };

  const fileStream = (path: string, text: string): unknown => {
    const route = "file_stream";
    const [, entity, project, name] = path.split("/").map(decodeURIComponent);
    const run = runs.get(`${entity}/${project}/${name}`);
    if (!run) throw new Refused(404, `run ${entity}/${project}/${name} not found`);
    const body = check(FileStreamRequest, JSON.parse(text), route);
    if (run.complete) violation(route, `run ${run.name} is complete; upsert it to resume`);
    run.requests += 1;
    const history = body.files?.[HISTORY];
    if (history) {
      if (history.offset > run.history.length)
        violation(route, `history offset ${history.offset} is past the file's ${run.history.length} lines`);
      const rows = history.content.map((line, i) => {
        if (Buffer.byteLength(line) > LIMITS.lineBytes)
          violation(route, `history line ${i} over ${LIMITS.lineBytes} bytes`);
        const row = check(HistoryRow, JSON.parse(line), `${route} history line ${i}`);
        for (const [key, value] of Object.entries(row)) {
          if (key.startsWith("_") && !["_step", "_timestamp", "_runtime"].includes(key))
            violation(route, `${key}: keys starting with _ are W&B's own`);
          if (JSON.stringify(value).length >= LIMITS.valueBytes) violation(route, `${key}: a value of 1 MB or more`);
        }
        return row;
      });
      const before = run.history[history.offset - 1];
      for (const [i, row] of rows.entries()) {
        const previous = i === 0 ? before : rows[i - 1];
        if (previous && row._step <= previous._step)
          violation(route, `_step ${row._step} after ${previous._step}: steps must increase`);
      }
      run.history.splice(history.offset, rows.length, ...rows);
    }
    const summary = body.files?.[SUMMARY];
    if (summary) {
      if (summary.content.length !== 1) violation(route, "the summary is one line");
      run.summary = check(z.record(z.string(), z.unknown()), JSON.parse(summary.content[0] ?? ""), `${route} summary`);
    }
    if (body.complete) {
      run.complete = true;
      run.exitcode = body.exitcode;
    }
    return { exitcode: null, limits: {} };
  };

  const handle = async (request: IncomingMessage, response: ServerResponse) => {
    const send = (status: number, value: unknown) => {
      response.writeHead(status, { "content-type": "application/json" });
      response.end(JSON.stringify(value));
    };
    try {
      const authorization = request.headers.authorization;
      authorizations.push(authorization);
      const text = await bodyOf(request);
      if (failing > 0) {
        failing -= 1;
        return send(503, { error: "service unavailable" });
      }
      if (authorization !== `Basic ${Buffer.from(`api:${apiKey}`).toString("base64")}`)
        return send(401, { error: "user is not logged in" });
      if (request.method !== "POST") throw new Refused(405, "POST only");
      if (Buffer.byteLength(text) > LIMITS.requestBytes) {
        violations.push(`${request.url}: body of ${text.length} bytes over ${LIMITS.requestBytes}`);
        throw new Refused(413, "request too large");
      }
      const url = new URL(request.url ?? "/", "http://stub");
      if (url.pathname === "/graphql") return send(200, upsert(text));
      const match = /^\/files\/([^/]+)\/([^/]+)\/([^/]+)\/file_stream$/.exec(url.pathname);
      if (match) return send(200, fileStream(match[0].slice("/files".length), text));
      throw new Refused(404, `no route ${url.pathname}`);
    } catch (error) {
      if (error instanceof Refused) return send(error.status, { error: error.message });
      violations.push(`${request.url}: ${error instanceof Error ? error.message : String(error)}`);
      return send(400, { error: "bad request" });
    }
  };

  const server: Server = createServer((request, response) => void handle(request, response));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    runs,
    violations,
    authorizations,
    failNext: (n) => {
      failing = n;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
