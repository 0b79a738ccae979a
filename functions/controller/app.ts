import type { Context, Hono } from "hono";
import type { z } from "zod";
import type { HttpLimitsConfig } from "../../shared/config/limits.ts";
import { parseJsonOrThrow, ValidationError } from "../../shared/errors.ts";
import { bodyText, createApp, readJson } from "../../shared/http.ts";
import type { Logger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import {
  CalculateOverall,
  ControllerCancel,
  ControllerInteract,
  ControllerStartSample,
  DrainWorker,
  Heartbeat,
  type ListWorkersResponse,
  type OverallResult,
  SESSION_ID_HEADER,
  SessionIdHeader,
  type SessionInfo,
  type WorkerState,
} from "../../shared/protocol/envApi.ts";
import { requireBearer } from "../../shared/security/bearer.ts";
import type { TurnResult } from "./sessions.ts";

/** What the routes ask of the controller. */
export interface ControllerApi {
  receiveHeartbeat(beat: Heartbeat): Promise<{ worker_id: number; status: WorkerState }>;
  startSample(name: string, index: number): Promise<{ sessionId: number; body: Uint8Array }>;
  interact(sessionId: number, messages: z.infer<typeof ControllerInteract>["messages"]): Promise<TurnResult>;
  cancel(sessionId: number): Promise<boolean>;
  cancelAll(): Promise<number>;
  listWorkers(): ListWorkersResponse;
  listSessions(): Record<string, SessionInfo>;
  taskNames(): string[];
  indicesOf(name: string): number[];
  calculateOverall(body: CalculateOverall): Promise<OverallResult>;
  drainWorker(address: string): Promise<{ address: string; draining: true; current: number }>;
}

export interface ControllerAppOptions {
  readonly envSecret: string | undefined;
  readonly controllerSecret: string | undefined;
  readonly httpLimits: HttpLimitsConfig;
  readonly log: Logger;
  readonly metrics?: ServiceMetrics;
}

/**
 * The controller's HTTP surface: every endpoint under /api (README.md). Requests are validated
 * here; worker answers to start_sample and interact go back to the caller as the worker's bytes.
 * @example const app = controllerApp(controller, { envSecret, controllerSecret, httpLimits, log });
 */
export function controllerApp(api: ControllerApi, options: ControllerAppOptions): Hono {
  const app = createApp(options.log, options.httpLimits, options.metrics);
  // Checked before any body is read: an unauthenticated call changes nothing.
  const workerAuth = requireBearer(options.envSecret, "env workers (AGENTRL_ENV_SECRET)");
  const callerAuth = requireBearer(
    options.controllerSecret,
    "rollout workers and evaluators (AGENTRL_CONTROLLER_SECRET)",
  );
  app.use("/api/*", (c, next) => (c.req.path === "/api/receive_heartbeat" ? workerAuth : callerAuth)(c, next));
  app.post("/api/receive_heartbeat", async (c) =>
    c.json(await api.receiveHeartbeat(await readJson(c, Heartbeat, "heartbeat"))),
  );
  app.post("/api/start_sample", async (c) => {
    const body = await readJson(c, ControllerStartSample, "start_sample body");
    const started = await api.startSample(body.name, body.index);
    return passThrough(c, started.body, { [SESSION_ID_HEADER]: String(started.sessionId) });
  });
  app.post("/api/interact", async (c) => {
    const sessionId = sessionIdFrom(c);
    const body = await readJson(c, ControllerInteract, "interact body");
    const turn = await api.interact(sessionId, body.messages);
    if (turn.kind === "reply") return passThrough(c, turn.body);
    // Infrastructure, not an agent outcome: clients restart with a fresh session and never score it.
    return c.json(
      { error: turn.error, reason: turn.reason, session_id: sessionId, finish: true, status: "task error" },
      502,
    );
  });
  app.post("/api/cancel", async (c) => {
    const text = await bodyText(c);
    const body = text.trim() ? parseJsonOrThrow(ControllerCancel, text, "cancel body") : {};
    const header = c.req.header(SESSION_ID_HEADER);
    const sessionId = header !== undefined ? sessionIdFrom(c) : body.session_id;
    if (sessionId === undefined) {
      throw new ValidationError("cancel request", [{ path: SESSION_ID_HEADER, message: "missing session_id header" }]);
    }
    return c.json({ session_id: sessionId, cancelled: await api.cancel(sessionId) });
  });
  app.post("/api/cancel_all", async (c) => c.json({ cancelled: await api.cancelAll() }));
  app.get("/api/list_workers", (c) => c.json(api.listWorkers()));
  app.post("/api/drain_worker", async (c) =>
    c.json(await api.drainWorker((await readJson(c, DrainWorker, "drain_worker body")).address)),
  );
  app.get("/api/list_sessions", (c) => c.json(api.listSessions()));
  app.get("/api/get_tasks", (c) => c.json(api.taskNames()));
  app.get("/api/get_indices", (c) => {
    const name = c.req.query("name");
    if (!name) throw new ValidationError("get_indices query", [{ path: "name", message: "required query parameter" }]);
    return c.json(api.indicesOf(name));
  });
  app.post("/api/calculate_overall", async (c) =>
    c.json(await api.calculateOverall(await readJson(c, CalculateOverall, "calculate_overall body"))),
  );
  return app;
}

/** A worker's JSON answer, as the worker sent it (only its routing fields were read). */
function passThrough(c: Context, body: Uint8Array, headers: Record<string, string> = {}) {
  return c.body(body as Uint8Array<ArrayBuffer>, 200, { ...headers, "content-type": "application/json" });
}

function sessionIdFrom(c: Context): number {
  const parsed = SessionIdHeader.safeParse(c.req.header(SESSION_ID_HEADER));
  if (!parsed.success) {
    throw new ValidationError("request headers", [
      { path: SESSION_ID_HEADER, message: parsed.error.issues[0]?.message ?? "invalid" },
    ]);
  }
  return parsed.data;
}
