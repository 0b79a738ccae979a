import type { Hono, MiddlewareHandler } from "hono";
import { routePath } from "hono/route";
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";
import type { HttpLimitsConfig } from "./config/limits.ts";
import { createApp, DEFAULT_HTTP_LIMITS, listen, type RunningServer } from "./http.ts";
import type { Logger } from "./log.ts";
import { requireBearer } from "./security/bearer.ts";
import { readSecrets } from "./security/secrets.ts";

/**
 * Prometheus metrics of one long-lived process (controller, policy server, env worker and pool,
 * feeder, rollout worker, trainer, gateway), in the text exposition format at `GET /metrics`.
 * One registry per service object, not prom-client's global one: tests run many services in one
 * process. Every series carries `role`; names start with `agentrl_`.
 *
 * HTTP servers mount /metrics on their own port (`createApp(log, limits, metrics)`); the roles
 * that serve nothing else (feeder, rollout worker, trainer, env pool) get a small listener
 * (`serveMetrics`) on `--metrics-port`. Either way /metrics needs `Bearer AGENTRL_METRICS_TOKEN`
 * when that variable is set: a read-only scrape credential, so Prometheus never holds the
 * controller's, policy's or gateway's keys. Unset, /metrics is open to whoever reaches the port.
 */
export class ServiceMetrics {
  readonly registry = new Registry();

  /**
   * @param role the process's role, a label on every series (`controller`, `policy-current`, `rollout-0`)
   * @param token the scrape token (AGENTRL_METRICS_TOKEN); undefined leaves /metrics open
   */
  constructor(
    readonly role: string,
    readonly token: string | undefined,
    options: { readonly processMetrics?: boolean } = {},
  ) {
    this.registry.setDefaultLabels({ role });
    // CPU, memory, event-loop lag, GC: prom-client's standard process metrics, prefixed
    if (options.processMetrics ?? true) {
      collectDefaultMetrics({ register: this.registry, prefix: "agentrl_" });
      // gauges that prom-client names like counters; promtool's lint rejects them
      for (const name of [
        "nodejs_active_handles_total",
        "nodejs_active_requests_total",
        "nodejs_active_resources_total",
      ])
        this.registry.removeSingleMetric(`agentrl_${name}`);
    }
  }

  /** A role's metrics with the scrape token from `env` (AGENTRL_METRICS_TOKEN). */
  static forRole(role: string, env: NodeJS.ProcessEnv = process.env): ServiceMetrics {
    return new ServiceMetrics(role, readSecrets(env).metricsToken);
  }

  counter<L extends string = never>(name: string, help: string, labelNames: readonly L[] = []): Counter<L> {
    return new Counter({ name, help, labelNames, registers: [this.registry] });
  }

  gauge<L extends string = never>(name: string, help: string, labelNames: readonly L[] = []): Gauge<L> {
    return new Gauge({ name, help, labelNames, registers: [this.registry] });
  }

  histogram<L extends string = never>(
    name: string,
    help: string,
    buckets: readonly number[],
    labelNames: readonly L[] = [],
  ): Histogram<L> {
    return new Histogram({ name, help, labelNames, buckets: [...buckets], registers: [this.registry] });
  }

  /** A gauge read at scrape time (sessions open, queue depth); a failed read leaves the last value. */
  gaugeOf(name: string, help: string, read: () => number | Promise<number>): void {
    new Gauge({
      name,
      help,
      registers: [this.registry],
      async collect() {
        const value = await Promise.resolve()
          .then(read)
          .catch(() => undefined);
        if (value !== undefined && Number.isFinite(value)) this.set(value);
      },
    });
  }

  /** Gauges by one label read at scrape time (`workers{status="ALIVE"}`); labels absent from a read are gone. */
  gaugesOf<L extends string>(
    name: string,
    help: string,
    label: L,
    read: () => Readonly<Record<string, number>> | Promise<Readonly<Record<string, number>>>,
  ): void {
    new Gauge<L>({
      name,
      help,
      labelNames: [label],
      registers: [this.registry],
      async collect() {
        const values = await Promise.resolve()
          .then(read)
          .catch(() => undefined);
        if (!values) return;
        this.reset();
        for (const [key, value] of Object.entries(values))
          if (Number.isFinite(value)) this.set({ [label]: key } as Record<L, string>, value);
      },
    });
  }

  /** A counter whose total another object keeps (the scheduler's generated tokens), read at scrape time. */
  counterOf(name: string, help: string, read: () => number): void {
    new Counter({
      name,
      help,
      registers: [this.registry],
      collect() {
        const value = read();
        if (!Number.isFinite(value)) return;
        this.reset();
        this.inc(value);
      },
    });
  }

  private http: MiddlewareHandler | undefined;

  /** Counts and times every request by method, matched route (never the raw path: ids would explode the series) and status. */
  httpMiddleware(): MiddlewareHandler {
    this.http ??= this.makeHttpMiddleware();
    return this.http;
  }

  private makeHttpMiddleware(): MiddlewareHandler {
    const requests = this.counter("agentrl_http_requests_total", "HTTP requests answered", [
      "method",
      "route",
      "status",
    ]);
    const seconds = this.histogram(
      "agentrl_http_request_duration_seconds",
      "HTTP request latency (s), from the first middleware to the answer",
      [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
      ["method", "route"],
    );
    return async (c, next) => {
      const start = process.hrtime.bigint();
      await next();
      if (c.req.path === "/metrics") return;
      // after next(), the pattern of the route that answered: a handler's (`/api/interact`), the
      // middleware's that refused (`/api/*` for a 401), or `*` when nothing matched (404)
      const route = routePath(c);
      requests.inc({ method: c.req.method, route, status: String(c.res.status) });
      seconds.observe({ method: c.req.method, route }, Number(process.hrtime.bigint() - start) / 1e9);
    };
  }

  /** `GET /metrics` on `app`, behind the scrape token. */
  mount(app: Hono): void {
    app.get("/metrics", requireBearer(this.token, "metrics scrapers (AGENTRL_METRICS_TOKEN)"), async (c) =>
      c.body(await this.registry.metrics(), 200, { "content-type": this.registry.contentType }),
    );
  }
}

/**
 * A listener serving only /metrics, for roles with no HTTP server of their own.
 * @example const server = await serveMetrics(metrics, { port: 9464, host: "0.0.0.0", log });
 */
export async function serveMetrics(
  metrics: ServiceMetrics,
  options: { readonly port: number; readonly host?: string; readonly log: Logger; readonly limits?: HttpLimitsConfig },
): Promise<RunningServer> {
  const limits = options.limits ?? DEFAULT_HTTP_LIMITS;
  const app = createApp(options.log, limits, metrics);
  return listen(app, options.port, options.host ?? "127.0.0.1", limits);
}

/** Messages waiting and in flight in each of `queues` (the pipeline's backpressure), read at scrape time. */
export function describeQueues(
  metrics: ServiceMetrics,
  queues: Readonly<Record<string, { approximateDepth(): Promise<{ visible: number; inFlight: number }> }>>,
): void {
  const depths = async () =>
    Object.fromEntries(
      await Promise.all(Object.entries(queues).map(async ([name, q]) => [name, await q.approximateDepth()] as const)),
    );
  metrics.gaugesOf("agentrl_queue_visible_messages", "messages waiting in the queue", "queue", async () =>
    Object.fromEntries(Object.entries(await depths()).map(([name, d]) => [name, d.visible])),
  );
  metrics.gaugesOf("agentrl_queue_in_flight_messages", "messages received and not yet deleted", "queue", async () =>
    Object.fromEntries(Object.entries(await depths()).map(([name, d]) => [name, d.inFlight])),
  );
}
