import { createGateway, type Gateway } from "../../functions/gateway/app.ts";
import type { ChatCodec } from "../../shared/chat/index.ts";
import { type ExperimentConfigInput, parseConfig } from "../../shared/config/index.ts";
import { listen, type RunningServer } from "../../shared/http.ts";
import { createLogger, type Logger } from "../../shared/log.ts";
import type { ServiceMetrics } from "../../shared/metrics.ts";
import { PolicyClient } from "../../shared/policy/client.ts";
import { PolicyPool } from "../../shared/policy/pool.ts";
import { MemberDropped, Trajectory, TrajectoryReady } from "../../shared/protocol/messages.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Transport } from "../../shared/transport/types.ts";
import { type FakePolicy, type FakePolicyBehaviour, startFakePolicy } from "../roles/rolloutHelpers.ts";
import { tempDir } from "../support/tmp.ts";

export const ADMIN_KEY = "gateway-admin-key-for-tests-0123456789";

export interface Harness {
  readonly url: string;
  readonly gateway: Gateway;
  readonly transport: Transport;
  readonly fake: FakePolicy;
  /** The clock the gateway reads (ms); tests move it forward. */
  readonly clock: { now: number };
  createSession(body?: Record<string, unknown>): Promise<{ sessionId: string; baseUrl: string; apiKey: string }>;
  /** Every TrajectoryReady / MemberDropped sent so far (received and deleted). */
  drain(): Promise<{ ready: TrajectoryReady[]; dropped: MemberDropped[] }>;
  stored(ready: TrajectoryReady): Promise<Trajectory>;
  close(): Promise<void>;
}

/** A gateway on the local transport in a temp folder, in front of the fake policy server (example task's expert). */
export async function startHarness(
  codec: ChatCodec,
  overrides: ExperimentConfigInput = {},
  behaviour: Partial<FakePolicyBehaviour> = {},
  log: Logger = createLogger({ role: "gateway-test" }),
  metrics?: ServiceMetrics,
): Promise<Harness> {
  const config = parseConfig({
    experimentId: "gw",
    ...overrides,
    rollout: { crossPolicy: { enabled: false }, ...overrides.rollout },
    transport: { localDir: tempDir("gateway-"), visibilityTimeoutSeconds: 5 },
    gateway: { baselineGroupSize: 1, ...overrides.gateway },
  });
  const transport = await createTransport(config.transport);
  const fake = await startFakePolicy(codec, behaviour);
  const clock = { now: Date.now() };
  let http: RunningServer | undefined;
  const gateway = createGateway({
    config,
    transport,
    codec,
    pool: new PolicyPool(config.rollout, { current: fake.url }),
    policy: new PolicyClient(10_000),
    adminKey: ADMIN_KEY,
    publicUrl: () => http?.url ?? "",
    now: () => clock.now,
    log,
    ...(metrics ? { metrics } : {}),
  });
  http = await listen(gateway.app);
  const url = http.url;
  return {
    url,
    gateway,
    transport,
    fake,
    clock,
    async createSession(body = {}) {
      const response = await fetch(`${url}/v1/sessions`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      if (response.status !== 201) throw new Error(`session: HTTP ${response.status} ${await response.text()}`);
      return (await response.json()) as { sessionId: string; baseUrl: string; apiKey: string };
    },
    async drain() {
      const queue = transport.queue("trajectories");
      const ready: TrajectoryReady[] = [];
      const dropped: MemberDropped[] = [];
      for (;;) {
        const messages = await queue.receive({ maxMessages: 10 });
        if (messages.length === 0) break;
        for (const m of messages) {
          const body = JSON.parse(m.body) as { kind?: string };
          if (body.kind === "member-dropped") dropped.push(MemberDropped.parse(body));
          else ready.push(TrajectoryReady.parse(body));
          await queue.delete(m.receiptHandle);
        }
      }
      return { ready, dropped };
    },
    async stored(ready) {
      const text = await transport.store("trajectories").getText(ready.key);
      if (text === undefined) throw new Error(`no object at ${ready.key}`);
      return Trajectory.parse(JSON.parse(text));
    },
    async close() {
      await http?.close();
      await fake.close();
      await transport.close();
    },
  };
}

/** POST with a bearer key; returns status, headers and the parsed body. */
export async function post(
  url: string,
  key: string | undefined,
  body: unknown,
): Promise<{ status: number; headers: Headers; json: Record<string, unknown> }> {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key === undefined ? {} : { authorization: `Bearer ${key}` }) },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    json = { text };
  }
  return { status: response.status, headers: response.headers, json };
}
