import { randomBytes } from "node:crypto";
import type { Context, Hono } from "hono";
import type { ExperimentConfig } from "../../shared/config/index.ts";
import { parseJsonOrThrow, ValidationError } from "../../shared/errors.ts";
import { bodyText, createApp, HttpError, readJson } from "../../shared/http.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import {
  type Generation,
  type PolicyClient,
  type PolicyEndpoint,
  PolicyRequestError,
  PolicyUnavailableError,
} from "../../shared/policy/client.ts";
import type { PolicyPool } from "../../shared/policy/pool.ts";
import { MemberDropped, Trajectory, TrajectoryReady } from "../../shared/protocol/messages.ts";
import { POLICY_VERSION_HEADER } from "../../shared/protocol/openai.ts";
import { readyOf, trajectoryKey } from "../../shared/protocol/trajectoryKeys.ts";
import { hashString, seededRandomFrom } from "../../shared/rl/random.ts";
import { bearerMatchesDigest, requireBearer, sha256 } from "../../shared/security/bearer.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { type AnswerParts, completionJson, completionStream } from "./answer.ts";
import { CreateSessionBody, EndBody, GatewayChatRequest, RewardBody, SafeId } from "./api.ts";
import { toolsKey } from "./conversation.ts";
import { mergeCalls, type Segment, trajectoriesOf } from "./export.ts";
import { inFlightTrajectoryCap, QueueDepth } from "./flow.ts";
import { GroupBook, type GroupRelease } from "./groups.ts";
import { type CallRecord, type GatewayCodec, planPrompt, type Session } from "./session.ts";

export interface GatewayOptions {
  readonly config: ExperimentConfig;
  /** Queues and the trajectory store (the gateway's row of the role-access table). */
  readonly transport: Pick<Transport, "queue" | "store">;
  readonly pool: Pick<PolicyPool, "draw">;
  readonly codec: GatewayCodec;
  readonly policy: Pick<PolicyClient, "generate">;
  /** AGENTRL_GATEWAY_ADMIN_KEY: the only key that opens sessions. */
  readonly adminKey: string;
  /** URL agents reach this gateway at (session baseUrls start with it). */
  readonly publicUrl: () => string;
  readonly log?: Logger;
  /** Clock, ms (tests move it to expire sessions). @default Date.now */
  readonly now?: () => number;
  /** Prometheus metrics at GET /metrics: requests, open sessions, the counters. @default - no /metrics */
  readonly metrics?: ServiceMetrics;
}

/** Cumulative counts of one gateway process (also stamped on every exported trajectory). */
export interface GatewayCounters {
  sessions: number;
  ended: number;
  abandoned: number;
  unrewarded: number;
  calls: number;
  mergedCalls: number;
  segments: number;
  driftCalls: number;
  renderMismatches: number;
  refused: number;
  groupsReleased: number;
  groupsEmpty: number;
  trajectories: number;
  dropped: number;
}

export interface Gateway {
  readonly app: Hono;
  readonly counters: Readonly<GatewayCounters>;
  /** Abandons idle sessions, releases groups past their timeout, retries failed exports. */
  sweep(): Promise<void>;
  /** Open sessions now. */
  openSessions(): number;
}

const SESSION_ROUTE_ERROR = "unauthorized: this session needs its own key (the apiKey POST /v1/sessions answered)";

/**
 * The gateway: agents point the `openai` SDK's baseURL at a session's `baseUrl`; each chat
 * completion goes to the policy pool (cross-policy sampling as the rollout worker draws it) with
 * the prompt as token ids, and is recorded (prompt ids, generated ids, behaviour log-probs,
 * versions, pool, tool calls). At `end` (once the session's group is complete) the calls become
 * trajectories in the trajectory store, announced with TrajectoryReady as the rollout worker
 * announces its own. See docs/gateway.md.
 */
export function createGateway(options: GatewayOptions): Gateway {
  const { config, codec, policy } = options;
  const gw = config.gateway;
  const rollout = config.rollout;
  const log = options.log ?? createLogger({ role: "gateway", experimentId: config.experimentId });
  const now = options.now ?? Date.now;
  const instanceId = randomBytes(4).toString("hex");
  const sessions = new Map<string, Session & { random: () => number; nextSeed: number }>();
  const groups = new GroupBook({
    baselineGroupSize: gw.baselineGroupSize,
    groupTimeoutMs: gw.groupTimeoutSeconds * 1000,
    instanceId,
  });
  const trajectories = options.transport.queue("trajectories");
  const store = options.transport.store("trajectories");
  const depth = new QueueDepth([trajectories, options.transport.queue("rollout-requests")]);
  const cap = inFlightTrajectoryCap(config);
  const pendingExports: GroupRelease[] = [];
  let sample = 0;
  const counters: GatewayCounters = {
    sessions: 0,
    ended: 0,
    abandoned: 0,
    unrewarded: 0,
    calls: 0,
    mergedCalls: 0,
    segments: 0,
    driftCalls: 0,
    renderMismatches: 0,
    refused: 0,
    groupsReleased: 0,
    groupsEmpty: 0,
    trajectories: 0,
    dropped: 0,
  };

  const app = createApp(log, config.limits.http, options.metrics);
  const openCount = () => [...sessions.values()].filter((s) => s.state === "open").length;
  if (options.metrics) {
    options.metrics.gaugeOf("agentrl_gateway_open_sessions", "sessions open now", openCount);
    for (const key of Object.keys(counters) as Array<keyof GatewayCounters>)
      options.metrics.counterOf(
        `agentrl_gateway_${key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)}_total`,
        `gateway counter ${key} (see GatewayCounters)`,
        () => counters[key],
      );
  }

  app.get("/health", (c) => c.json({ status: "ok", openSessions: openCount() }));

  // ---- the admin key opens sessions, and does nothing else
  app.post("/v1/sessions", requireBearer(options.adminKey, "gateway admins (AGENTRL_GATEWAY_ADMIN_KEY)"), async (c) => {
    const body = await readJson(c, CreateSessionBody, "session request");
    const at = now();
    const refuse = (why: string) => {
      counters.refused += 1;
      c.header("retry-after", String(gw.retryAfterSeconds));
      return c.json({ error: why }, 429);
    };
    const open = openCount();
    if (open >= gw.maxSessions) return refuse(`${open} sessions are open (gateway.maxSessions ${gw.maxSessions})`);
    const outstanding = open + groups.waiting + (await depth.outstanding(at));
    if (outstanding + 1 > cap)
      return refuse(
        `${outstanding} trajectories in flight (open and unreleased sessions, queued requests and unconsumed trajectories); ` +
          `one more would break the staleness bound of ${cap} (rollout.maxInFlightBatches × trainer.batchSize × rollout.groupSize)`,
      );
    const sessionId = `gs-${randomBytes(9).toString("base64url").replace(/[-_]/g, "x")}`;
    const apiKey = `gsk-${randomBytes(24).toString("base64url")}`;
    const session = {
      sessionId,
      keyDigest: sha256(apiKey),
      task: body.task,
      ...(body.groupId === undefined ? {} : { groupId: body.groupId, groupSize: body.groupSize as number }),
      metadata: body.metadata ?? {},
      createdAt: at,
      lastActivity: at,
      state: "open" as const,
      calls: [],
      inFlight: 0,
      tokens: 0,
      trajectoryIds: [],
      random: seededRandomFrom(config.seed, sessionId, "pool"),
      nextSeed: 0,
    };
    const refused = groups.join(session, at);
    if (refused !== undefined) throw new HttpError(409, refused);
    sessions.set(sessionId, session);
    counters.sessions += 1;
    log.info({ sessionId, task: body.task, groupId: body.groupId }, "session opened");
    const baseUrl = `${options.publicUrl().replace(/\/+$/, "")}/sessions/${sessionId}/v1`;
    return c.json({ sessionId, baseUrl, apiKey }, 201);
  });

  /** The session named in the path, when the request carries its key (401 otherwise, whether or not it exists). */
  const sessionOf = (c: Context) => {
    const id = SafeId.safeParse(c.req.param("id"));
    const session = id.success ? sessions.get(id.data) : undefined;
    if (!session || !bearerMatchesDigest(c.req.header("authorization"), session.keyDigest)) {
      c.header("www-authenticate", 'Bearer realm="agentrl-gateway"');
      throw new HttpError(401, SESSION_ROUTE_ERROR);
    }
    return session;
  };

  const stateOf = (session: Session) => ({
    sessionId: session.sessionId,
    state: session.state,
    task: session.task,
    groupId: session.groupId ?? null,
    groupSize: session.groupSize ?? null,
    metadata: session.metadata,
    calls: session.calls.length,
    tokens: session.tokens,
    reward: session.reward ?? null,
    driftCalls: session.calls.filter((call) => call.drift).length,
    mergedCalls: session.calls.filter((call) => call.continued).length,
    trajectoryIds: session.trajectoryIds,
    reason: session.reason ?? null,
    createdAt: new Date(session.createdAt).toISOString(),
    lastActivity: new Date(session.lastActivity).toISOString(),
  });

  app.get("/v1/sessions/:id", (c) => c.json(stateOf(sessionOf(c))));

  app.post("/v1/sessions/:id/reward", async (c) => {
    const session = sessionOf(c);
    const body = await readJson(c, RewardBody, "reward");
    if (session.state !== "open" && session.state !== "ended")
      throw new HttpError(
        409,
        `session ${session.sessionId} is ${session.state}: rewards are taken until it is released`,
      );
    if (body.completionId !== undefined) {
      const call = session.calls.find((k) => k.completionId === body.completionId);
      if (!call) throw new HttpError(404, `completionId: no call ${body.completionId} in this session`);
      call.reward = body.reward;
    } else session.reward = body.reward;
    session.lastActivity = now();
    return c.json(stateOf(session));
  });

  app.post("/v1/sessions/:id/end", async (c) => {
    const session = sessionOf(c);
    const text = await bodyText(c);
    if (text.trim() !== "") parseJsonOrThrow(EndBody, text, "end");
    if (session.state === "open") {
      if (session.inFlight > 0)
        throw new HttpError(409, `session ${session.sessionId} has calls running; end it after they answer`);
      session.state = "ended";
      session.lastActivity = now();
      counters.ended += 1;
      await exportAll(groups.finished(session, now()));
    }
    return c.json(stateOf(session));
  });

  app.get("/sessions/:id/v1/models", (c) => {
    sessionOf(c);
    return c.json({ object: "list", data: [{ id: "agentrl", object: "model", created: 0, owned_by: "agentrl" }] });
  });

  app.post("/sessions/:id/v1/chat/completions", async (c) => {
    const session = sessionOf(c);
    if (session.state !== "open")
      throw new HttpError(409, `session ${session.sessionId} is ${session.state}: no more calls`);
    if (session.calls.length + session.inFlight >= gw.maxCallsPerSession)
      throw new HttpError(
        409,
        `session ${session.sessionId} made ${gw.maxCallsPerSession} calls (gateway.maxCallsPerSession)`,
      );
    const body = await readJson(c, GatewayChatRequest, "chat completion request");
    const tools = (body.tools ?? []).map((t) => ({ type: "function" as const, function: t.function }));
    const key = toolsKey(tools);
    const plan = planPrompt(codec, session.calls, body.messages, tools, key);
    const promptLength = plan.promptIds.length;
    if (promptLength >= rollout.maxTotalTokens)
      throw new ValidationError("chat completion request", [
        {
          path: "messages",
          message: `the prompt is ${promptLength} tokens; rollout.maxTotalTokens is ${rollout.maxTotalTokens}`,
        },
      ]);
    const newTokens = promptLength - plan.reusedTokens;
    const sessionRoom = gw.maxTokensPerSession - session.tokens - newTokens;
    if (sessionRoom <= 0)
      throw new HttpError(
        409,
        `session ${session.sessionId} would pass ${gw.maxTokensPerSession} tokens (gateway.maxTokensPerSession)`,
      );
    const asked = body.max_completion_tokens ?? body.max_tokens ?? rollout.maxTokensPerTurn;
    const maxTokens = Math.min(asked, rollout.maxTokensPerTurn, rollout.maxTotalTokens - promptLength, sessionRoom);
    const endpoint: PolicyEndpoint = options.pool.draw(session.random);
    const seed = hashString(`${config.seed}/${session.sessionId}/${session.nextSeed++}`) & 0x7fffffff;
    session.inFlight += 1;
    session.lastActivity = now();
    const t0 = performance.now();
    let generation: Generation;
    try {
      generation = await policy.generate(
        endpoint,
        {
          messages: body.messages,
          tools,
          temperature: rollout.temperature,
          topP: rollout.topP,
          maxTokens,
          seed,
          promptTokenIds: plan.promptIds,
        },
        c.req.raw.signal,
      );
    } catch (error) {
      if (error instanceof PolicyUnavailableError)
        throw new HttpError(503, `the policy could not answer: ${error.message}`);
      if (error instanceof PolicyRequestError)
        throw new HttpError(502, `the policy refused the request: ${error.message}`);
      throw error;
    } finally {
      session.inFlight -= 1;
      session.lastActivity = now();
    }
    const policyMs = performance.now() - t0;
    if (session.state !== "open")
      throw new HttpError(409, `session ${session.sessionId} is ${session.state}: the answer was not recorded`);
    const call = recordCall(session, body.messages, tools, key, plan, endpoint, generation, policyMs);
    session.tokens += newTokens + call.completionIds.length;
    counters.calls += 1;
    if (call.continued) counters.mergedCalls += 1;
    if (call.drift) counters.driftCalls += 1;
    if (call.renderMismatch) counters.renderMismatches += 1;
    if (call.drift)
      log.warn(
        { sessionId: session.sessionId, completionId: call.completionId },
        "re-tokenization drift: the call starts a segment of its own",
      );
    const parts: AnswerParts = {
      completionId: call.completionId,
      model: body.model ?? "agentrl",
      created: Math.floor(now() / 1000),
      message: call.answer,
      finishReason: call.finishReason,
      promptTokens: promptLength,
      completionTokens: call.completionIds.length,
      ...(body.return_token_ids ? { tokenIds: { prompt: call.promptIds, completion: call.completionIds } } : {}),
    };
    const version = call.versions.find((v) => v >= 0);
    if (version !== undefined) c.header(POLICY_VERSION_HEADER, String(version));
    if (body.stream) {
      c.header("content-type", "text/event-stream");
      c.header("cache-control", "no-cache");
      return c.body(completionStream(parts, body.stream_options?.include_usage ?? false));
    }
    return c.json(completionJson(parts));
  });

  function recordCall(
    session: Session,
    messages: CallRecord["messages"],
    tools: CallRecord["tools"],
    key: string,
    plan: ReturnType<typeof planPrompt>,
    endpoint: PolicyEndpoint,
    generation: Generation,
    policyMs: number,
  ): CallRecord {
    const trace = generation.trace;
    const index = session.calls.length;
    const base = {
      completionId: `chatcmpl-${session.sessionId}-${index}`,
      index,
      messages: [...messages],
      answer: generation.message,
      tools,
      toolsKey: key,
      finishReason: generation.finishReason,
      promptIds: plan.promptIds,
      pool: endpoint.pool,
      toolCalls: (generation.message.tool_calls ?? []).map((t) => ({
        name: t.function.name,
        arguments: t.function.arguments,
      })),
      continued: plan.continued,
      renderMismatch: plan.renderMismatch,
      policyMs,
    };
    // The server conditioned on other tokens than the gateway sent (it re-tokenized or cut the
    // prompt): the completion does not follow these prompt ids, so it is kept as context only.
    const serverDrift =
      trace?.prompt_token_ids !== undefined &&
      (trace.prompt_truncated ||
        trace.prompt_token_ids.length !== plan.promptIds.length ||
        trace.prompt_token_ids.some((id, i) => id !== plan.promptIds[i]));
    let call: CallRecord;
    if (trace && endpoint.requiresTrace && !serverDrift) {
      call = {
        ...base,
        completionIds: trace.token_ids,
        logprobs: behaviourLogprobs(trace, rollout, endpoint.pool),
        fullLogprobs: trace.logprobs,
        versions: trace.policy_versions,
        traced: true,
        drift: plan.drift,
      };
    } else {
      const ids =
        trace && endpoint.requiresTrace ? trace.token_ids : codec.assistantTokens(messages, generation.message, tools);
      call = {
        ...base,
        completionIds: ids,
        logprobs: ids.map(() => 0),
        fullLogprobs: ids.map(() => 0),
        versions: ids.map(() => -1),
        traced: false,
        drift: plan.drift || serverDrift,
      };
    }
    session.calls.push(call);
    return call;
  }

  const counterStamp = (): Record<string, number> => ({
    gateway_total_sessions: counters.sessions,
    gateway_total_abandoned: counters.abandoned,
    gateway_total_unrewarded: counters.unrewarded,
    gateway_total_calls: counters.calls,
    gateway_total_drift_calls: counters.driftCalls,
    gateway_total_refused: counters.refused,
  });

  /** Exports one released group: trajectories first (stored, then announced), then its dropped members. */
  async function exportGroup(release: GroupRelease): Promise<void> {
    const trained: Array<{ session: Session; segments: Segment[] }> = [];
    const dropped: Array<{ trajectoryId: string; reason: string }> = [];
    for (const member of release.members) {
      const rewarded = member.reward !== undefined || member.calls.some((k) => k.reward !== undefined);
      if (member.state === "ended" && rewarded && member.calls.length > 0)
        trained.push({ session: member, segments: mergeCalls(member.calls) });
      else {
        const reason =
          member.state === "abandoned"
            ? (member.reason ?? "abandoned")
            : member.calls.length === 0
              ? "ended without calls"
              : "ended without a reward";
        if (member.state === "ended" && member.calls.length > 0 && !rewarded) counters.unrewarded += 1;
        member.reason = reason;
        dropped.push({ trajectoryId: `${member.sessionId}-dropped`, reason });
      }
    }
    for (let i = 0; i < release.missing; i++)
      dropped.push({
        trajectoryId: `${release.groupId}-missing-${i}`,
        reason: "the session never joined before the group timeout",
      });
    const segmentCount = trained.reduce((sum, t) => sum + t.segments.length, 0);
    for (const member of release.members) if (member.state === "ended") member.state = "released";
    if (segmentCount === 0) {
      counters.groupsEmpty += 1;
      return;
    }
    const groupSize = segmentCount + dropped.length;
    const ready: TrajectoryReady[] = [];
    for (const { session, segments } of trained) {
      const list = trajectoriesOf(session, segments, {
        experimentId: config.experimentId,
        groupId: release.groupId,
        groupSize,
        firstSample: sample,
        behaviorLogprobs: rollout.behaviorLogprobs,
        counters: counterStamp(),
      });
      sample += list.length;
      for (const trajectory of list) {
        const parsed = Trajectory.parse(trajectory);
        const key = trajectoryKey(config.experimentId, release.groupId, parsed.trajectoryId);
        await store.put(key, JSON.stringify(parsed));
        ready.push(TrajectoryReady.parse(readyOf(parsed, key)));
        session.trajectoryIds.push(parsed.trajectoryId);
      }
      counters.segments += segments.length;
    }
    for (const event of ready) await trajectories.send(JSON.stringify(event));
    for (const drop of dropped)
      await trajectories.send(
        JSON.stringify(
          MemberDropped.parse({
            schemaVersion: 1,
            kind: "member-dropped",
            trajectoryId: drop.trajectoryId,
            experimentId: config.experimentId,
            groupId: release.groupId,
            groupSize,
            task: release.members[0]?.task ?? "gateway",
            attempts: 1,
            reason: drop.reason,
          }),
        ),
      );
    counters.groupsReleased += 1;
    counters.trajectories += ready.length;
    counters.dropped += dropped.length;
    log.info({ groupId: release.groupId, trajectories: ready.length, dropped: dropped.length }, "group exported");
  }

  async function exportAll(releases: readonly GroupRelease[]): Promise<void> {
    for (const release of releases) {
      try {
        await exportGroup(release);
      } catch (error) {
        // the store or queue failed: the next sweep tries again (ids are stable, the trainer dedups)
        log.error({ groupId: release.groupId, err: error }, "group export failed; retrying at the next sweep");
        pendingExports.push(release);
      }
    }
  }

  const abandon = (session: Session, reason: string) => {
    session.state = "abandoned";
    session.reason = reason;
    counters.abandoned += 1;
    log.warn({ sessionId: session.sessionId, reason }, "session abandoned");
  };

  return {
    app,
    counters,
    openSessions: openCount,
    async sweep() {
      const at = now();
      const releases: GroupRelease[] = pendingExports.splice(0);
      for (const session of sessions.values()) {
        if (session.state !== "open" || session.inFlight > 0) continue;
        if (at - session.lastActivity < gw.idleTimeoutSeconds * 1000) continue;
        abandon(session, `idle for more than ${gw.idleTimeoutSeconds} s (gateway.idleTimeoutSeconds)`);
        releases.push(...groups.finished(session, at));
      }
      releases.push(
        ...groups.due(at, (session) => abandon(session, "its group timed out (gateway.groupTimeoutSeconds)")),
      );
      await exportAll(releases);
      // forget finished sessions an hour after their last activity (GET answers until then)
      for (const [id, session] of sessions)
        if ((session.state === "released" || session.state === "abandoned") && at - session.lastActivity > 3_600_000)
          sessions.delete(id);
    },
  };
}

/** As the rollout worker records them (functions/rollout/episode.ts). */
function behaviourLogprobs(
  trace: NonNullable<Generation["trace"]>,
  rollout: ExperimentConfig["rollout"],
  pool: string,
): readonly number[] {
  if (rollout.behaviorLogprobs === "full") return trace.logprobs;
  if (trace.sampled_logprobs) return trace.sampled_logprobs;
  if (rollout.topP === 1 && rollout.temperature > 0) return trace.logprobs;
  throw new PolicyUnavailableError(
    `policy ${pool}: rollout.behaviorLogprobs is "sampled" with top_p ${rollout.topP} / temperature ${rollout.temperature}, but the server reports no sampled_logprobs`,
  );
}
