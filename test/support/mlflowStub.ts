import { randomUUID } from "node:crypto";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { z } from "zod";
import { bodyOf } from "./httpBody.ts";

/**
 * A stand-in MLflow tracking server on 127.0.0.1: the REST API's routes the sink uses, each body
 * checked with zod against MLflow's documented shapes and limits (REST API "Log Batch": 1000
 * metrics, 100 params, 100 tags, 1000 entities, 1 MB; mlflow/utils/validation.py: keys 250,
 * param values 6000, tag values 8000; names of alphanumerics, `_ - . / ` and spaces; params
 * immutable). A violation is answered 400 INVALID_PARAMETER_VALUE, as MLflow does, and kept in
 * `violations` so a test fails on it even when the sink swallows the error.
 */
const LIMITS = {
  metrics: 1000,
  params: 100,
  tags: 100,
  entities: 1000,
  bytes: 1_000_000,
  key: 250,
  param: 6000,
  tag: 8000,
};

const Name = z
  .string()
  .min(1)
  .max(LIMITS.key)
  .regex(/^[\w\-./ ]+$/, "names may only contain alphanumerics, _, -, ., / and spaces");
const Tag = z.object({ key: Name, value: z.string().max(LIMITS.tag) }).strict();
const Param = z.object({ key: Name, value: z.string().max(LIMITS.param) }).strict();
const Metric = z
  .object({ key: Name, value: z.number(), timestamp: z.number().int(), step: z.number().int().optional() })
  .strict();
const RunId = z.string().min(1);

const LogBatch = z
  .object({
    run_id: RunId,
    metrics: z.array(Metric).max(LIMITS.metrics).default([]),
    params: z.array(Param).max(LIMITS.params).default([]),
    tags: z.array(Tag).max(LIMITS.tags).default([]),
  })
  .strict()
  .refine((b) => b.metrics.length + b.params.length + b.tags.length <= LIMITS.entities, {
    message: `at most ${LIMITS.entities} metrics, params and tags in total`,
  });
const CreateExperiment = z
  .object({ name: z.string().min(1), artifact_location: z.string().optional(), tags: z.array(Tag).optional() })
  .strict();
const CreateRun = z
  .object({
    experiment_id: z.string().min(1),
    run_name: z.string().optional(),
    start_time: z.number().int(),
    tags: z.array(Tag).max(LIMITS.tags).optional(),
    user_id: z.string().optional(),
  })
  .strict();
const UpdateRun = z
  .object({
    run_id: RunId,
    status: z.enum(["RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"]).optional(),
    end_time: z.number().int().optional(),
    run_name: z.string().optional(),
  })
  .strict();

export interface StubRun {
  readonly runId: string;
  readonly experimentId: string;
  readonly name: string | undefined;
  status: string;
  readonly params: Map<string, string>;
  readonly tags: Map<string, string>;
  readonly metrics: Array<z.infer<typeof Metric>>;
  /** log-batch requests received for this run. */
  batches: number;
}

export interface MlflowStub {
  readonly url: string;
  readonly experiments: Map<string, string>;
  readonly runs: Map<string, StubRun>;
  /** Every request that broke the API's shapes or limits, with zod's reason. */
  readonly violations: string[];
  /** Authorization headers seen. */
  readonly authorizations: Array<string | undefined>;
  /** The next `n` requests answer 503 (a server briefly away). */
  failNext(n: number): void;
  close(): Promise<void>;
}

class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export async function startMlflowStub(): Promise<MlflowStub> {
  const experiments = new Map<string, string>();
  const runs = new Map<string, StubRun>();
  const violations: string[] = [];
  const authorizations: Array<string | undefined> = [];
  let failing = 0;

  const parse = <S extends z.ZodType>(schema: S, text: string, route: string): z.output<S> => {
    if (text.length > LIMITS.bytes) {
      violations.push(`${route}: body of ${text.length} bytes exceeds 1 MB`);
      throw new ApiError(400, "INVALID_PARAMETER_VALUE", "request over 1 MB");
    }
    const result = schema.safeParse(JSON.parse(text));
    if (!result.success) {
      const reason = result.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
      violations.push(`${route}: ${reason}`);
      throw new ApiError(400, "INVALID_PARAMETER_VALUE", reason);
    }
    return result.data;
  };
  const runOf = (runId: string): StubRun => {
    const run = runs.get(runId);
    if (!run) throw new ApiError(404, "RESOURCE_DOES_NOT_EXIST", `run ${runId} not found`);
    return run;
  };

  const route = (method: string, path: string, query: URLSearchParams, text: string): unknown => {
    if (method === "GET" && path === "experiments/get-by-name") {
      const name = query.get("experiment_name") ?? "";
      const id = experiments.get(name);
      if (!id) throw new ApiError(404, "RESOURCE_DOES_NOT_EXIST", `experiment '${name}' does not exist`);
      return { experiment: { experiment_id: id, name, lifecycle_stage: "active" } };
    }
    if (method !== "POST") throw new ApiError(405, "ENDPOINT_NOT_FOUND", `${method} ${path}`);
    if (path === "experiments/create") {
      const body = parse(CreateExperiment, text, path);
      if (experiments.has(body.name)) throw new ApiError(400, "RESOURCE_ALREADY_EXISTS", `'${body.name}' exists`);
      const id = String(experiments.size + 1);
      experiments.set(body.name, id);
      return { experiment_id: id };
    }
    if (path === "runs/create") {
      const body = parse(CreateRun, text, path);
      if (![...experiments.values()].includes(body.experiment_id))
        throw new ApiError(404, "RESOURCE_DOES_NOT_EXIST", `experiment ${body.experiment_id}`);
      const runId = randomUUID().replaceAll("-", "");
      const run: StubRun = {
        runId,
        experimentId: body.experiment_id,
        name: body.run_name,
        status: "RUNNING",
        params: new Map(),
        tags: new Map((body.tags ?? []).map((t) => [t.key, t.value])),
        metrics: [],
        batches: 0,
      };
      runs.set(runId, run);
      return { run: { info: { run_id: runId, experiment_id: body.experiment_id, status: "RUNNING" }, data: {} } };
    }
    if (path === "runs/log-batch") {
      const body = parse(LogBatch, text, path);
      const run = runOf(body.run_id);
      for (const p of body.params) {
        const before = run.params.get(p.key);
        if (before !== undefined && before !== p.value) {
          violations.push(`${path}: param ${p.key} changed from '${before}' to '${p.value}'`);
          throw new ApiError(400, "INVALID_PARAMETER_VALUE", `param ${p.key} cannot be changed`);
        }
        run.params.set(p.key, p.value);
      }
      for (const t of body.tags) run.tags.set(t.key, t.value);
      run.metrics.push(...body.metrics);
      run.batches += 1;
      return {};
    }
    if (path === "runs/update") {
      const body = parse(UpdateRun, text, path);
      const run = runOf(body.run_id);
      if (body.status) run.status = body.status;
      return { run_info: { run_id: run.runId, status: run.status } };
    }
    throw new ApiError(404, "ENDPOINT_NOT_FOUND", path);
  };

  const server: Server = createServer(async (request, response) => {
    const url = new URL(request.url ?? "/", "http://stub");
    const text = await bodyOf(request);
    authorizations.push(request.headers.authorization);
    const send = (status: number, body: unknown) => {
      response.writeHead(status, { "content-type": "application/json" });
      response.end(JSON.stringify(body));
    };
    if (failing > 0) {
      failing -= 1;
      return send(503, { error_code: "TEMPORARILY_UNAVAILABLE", message: "stub told to fail" });
    }
    const prefix = "/api/2.0/mlflow/";
    try {
      if (!url.pathname.startsWith(prefix)) throw new ApiError(404, "ENDPOINT_NOT_FOUND", url.pathname);
      send(200, route(request.method ?? "GET", url.pathname.slice(prefix.length), url.searchParams, text));
    } catch (error) {
      if (error instanceof ApiError) send(error.status, { error_code: error.code, message: error.message });
      else send(400, { error_code: "MALFORMED_REQUEST", message: String(error) });
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    experiments,
    runs,
    violations,
    authorizations,
    failNext: (n) => {
      failing = n;
    },
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
