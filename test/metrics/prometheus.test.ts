import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BASE_CHECKPOINT_DIR, importBase } from "../../cli/launch/pipeline.ts";
import { exampleTask } from "../../env-images/example/index.ts";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import { ChatCodec } from "../../shared/chat/index.ts";
import { parseConfig } from "../../shared/config/index.ts";
import { ControllerClient } from "../../shared/env/client.ts";
import { type RunningWorker, serveTask } from "../../shared/env/worker.ts";
import { listen, type RunningServer } from "../../shared/http.ts";
import { createLogger } from "../../shared/log.ts";
import { ServiceMetrics } from "../../shared/metrics.ts";
import { freePort } from "../../shared/net.ts";
import { createTransport } from "../../shared/transport/index.ts";
import { createPolicyServer, type PolicyServer } from "../../trainer-image/policy-server/app.ts";
import { waitFor } from "../env/helpers.ts";
import { type Harness, startHarness } from "../gateway/harness.ts";
import { ScriptedPolicy } from "../policy-server/scripted.ts";
import { exampleCodec } from "../roles/rolloutHelpers.ts";
import { SYNC_TIMEOUT_MS } from "../support/cli.ts";
import { commandMissing, requireOrSkip } from "../support/requirements.ts";
import { tempDir } from "../support/tmp.ts";

/**
 * `/metrics` of the long-lived roles, checked by Prometheus's own tools from Debian's
 * `prometheus` package: every exposition passes `promtool check metrics`, and a real Prometheus
 * scrapes all of them (with the scrape token) until every target is up and the series are there.
 * In-process: controller, env worker, policy server, gateway. As CLI processes with
 * `--metrics-port 0`: feeder, trainer, rollout worker and env pool (the roles with no HTTP of
 * their own).
 */
const ready = requireOrSkip("prometheus.test.ts", "/metrics checked by promtool and scraped by Prometheus", [
  ...commandMissing("promtool", "apt-get install -y prometheus"),
  ...commandMissing("prometheus", "apt-get install -y prometheus"),
]);

const TOKEN = "metrics-token-0123456789abcdef";
const log = createLogger({ role: "metrics-test" });
const targets = new Map<string, string>(); // role -> /metrics URL
const closers: Array<() => Promise<void> | void> = [];
let controller: RunningController;

/** Starts `agentrl <args> --metrics-port 0` and resolves with the URL its `metrics` line names. */
function cliRole(args: string[], env: NodeJS.ProcessEnv): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(process.execPath, ["bin/agentrl.mjs", ...args, "--metrics-port", "0"], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
      }),
  );
  return new Promise((resolve, reject) => {
    let buffered = "";
    let errors = "";
    child.stderr?.on("data", (chunk: Buffer) => {
      errors = (errors + chunk.toString()).slice(-2000);
    });
    child.stdout?.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      const match = /\{"event":"metrics"[^\n]*"url":"([^"]+)"/.exec(buffered);
      if (match?.[1]) resolve({ child, url: match[1] });
    });
    child.once("exit", (code) =>
      reject(new Error(`agentrl ${args[0]} exited (${code}) before serving /metrics: ${errors}`)),
    );
  });
}

const scrape = (url: string, token: string | null = TOKEN) =>
  fetch(url, token ? { headers: { authorization: `Bearer ${token}` } } : {});

describe.skipIf(!ready)("Prometheus /metrics", () => {
  let harness: Harness;
  let policy: PolicyServer;
  let policyHttp: RunningServer;
  let worker: RunningWorker;

  beforeAll(async () => {
    controller = await startController({ port: 0, metrics: new ServiceMetrics("controller", TOKEN) });
    closers.push(() => controller.close());
    targets.set("controller", `${controller.url}/metrics`);

    worker = await serveTask(exampleTask, {
      controllerUrl: controller.url,
      heartbeatMs: 200,
      metrics: new ServiceMetrics("env-example", TOKEN),
    });
    closers.push(() => worker.close());
    targets.set("env-example", `${worker.url}/metrics`);

    const codec = ChatCodec.train([{ messages: [{ role: "user", content: "hi" }], tools: [] }], 300);
    const scripted = new ScriptedPolicy(0, [codec.endOfTurnId], { vocabSize: 300, contextLength: 64, fallback: 0 });
    policy = createPolicyServer({
      policy: scripted,
      codec,
      log,
      maxBatch: 2,
      metrics: new ServiceMetrics("policy-current", TOKEN),
    });
    policyHttp = await listen(policy.app);
    closers.push(async () => {
      await policyHttp.close();
      await policy.close();
    });
    targets.set("policy-current", `${policyHttp.url}/metrics`);

    harness = await startHarness(await exampleCodec(), {}, {}, log, new ServiceMetrics("gateway", TOKEN));
    closers.push(() => harness.close());
    targets.set("gateway", `${harness.url}/metrics`);

    const runDir = tempDir("agentrl-metrics-");
    const env = { AGENTRL_METRICS_TOKEN: TOKEN, AGENTRL_LOG_LEVEL: "warn" };
    const set = [
      "--set",
      `transport.localDir=${join(runDir, "transport")}`,
      "--set",
      "tracking.tensorboard.enabled=false",
    ];
    // the trainer starts from a policy version: the committed base, as a run imports it
    const config = parseConfig({ transport: { localDir: join(runDir, "transport") } });
    const transport = await createTransport(config.transport);
    await importBase(transport.store("checkpoints"), BASE_CHECKPOINT_DIR, config.policy.backend);
    await transport.close();
    const poolArgs = ["env", "pool", "--controller", controller.url, "--task", "example", "--min", "0", "--max", "1"];
    const [feeder, trainer, rollout, pool] = await Promise.all([
      cliRole(["feeder", ...set], env),
      cliRole(["trainer", ...set, "--metrics", join(runDir, "metrics.jsonl")], env),
      cliRole(["rollout", ...set, "--controller-url", controller.url, "--current-url", `${policyHttp.url}/v1`], env),
      // its state folder in the run, not the CLI's default under /tmp (which would outlive the test)
      cliRole([...poolArgs, "--state-dir", join(runDir, "envpool")], env),
    ]);
    targets.set("feeder", feeder.url);
    targets.set("trainer", trainer.url);
    targets.set("rollout", rollout.url);
    targets.set("envpool-example", pool.url);

    // traffic, so that request, session and token series exist
    await waitFor(
      async () => (await new ControllerClient({ baseUrl: controller.url }).listWorkers()).example !== undefined,
    );
    const env2 = new ControllerClient({ baseUrl: controller.url });
    await env2.startSample("example", 0);
    await fetch(`${policyHttp.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
    });
    await harness.createSession();
  }, 180_000);

  afterAll(async () => {
    for (const close of closers.splice(0).reverse()) await close();
  });

  it("needs the scrape token on every role, and every exposition passes promtool", async () => {
    expect([...targets.keys()].sort()).toEqual(
      [
        "controller",
        "env-example",
        "envpool-example",
        "feeder",
        "gateway",
        "policy-current",
        "rollout",
        "trainer",
      ].sort(),
    );
    for (const [role, url] of targets) {
      expect((await scrape(url, null)).status, `${role} without the token`).toBe(401);
      const response = await scrape(url);
      expect(response.status, role).toBe(200);
      expect(response.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
      const text = await response.text();
      // promtool exits non-zero on a malformed exposition or a lint problem (naming, units, types)
      const checked = execFileSync("promtool", ["check", "metrics"], {
        input: text,
        encoding: "utf8",
        timeout: SYNC_TIMEOUT_MS,
      });
      expect(checked, role).toBe("");
      expect(text, role).toContain(`role="${role}"`);
      expect(text, role).toContain("agentrl_process_cpu_seconds_total");
    }
    const text = async (role: string) => (await scrape(targets.get(role) as string)).text();
    expect(await text("controller")).toMatch(/agentrl_controller_sessions\{task="example",role="controller"\} 1/);
    expect(await text("controller")).toMatch(
      /agentrl_http_requests_total\{method="POST",route="\/api\/start_sample",status="200",role="controller"\} 1/,
    );
    expect(await text("env-example")).toMatch(/agentrl_env_sessions\{role="env-example"\} 1/);
    expect(await text("policy-current")).toMatch(
      /agentrl_policy_generated_tokens_total\{role="policy-current"\} [1-9]/,
    );
    expect(await text("gateway")).toMatch(/agentrl_gateway_sessions_total\{role="gateway"\} 1/);
    expect(await text("feeder")).toMatch(
      /agentrl_queue_visible_messages\{queue="rollout-requests",role="feeder"\} \d+/,
    );
    expect(await text("envpool-example")).toMatch(/agentrl_envpool_desired_workers\{role="envpool-example"\} \d/);
    expect(await text("rollout")).toContain("# TYPE agentrl_rollout_tokens_total counter");
    expect(await text("trainer")).toMatch(/agentrl_trainer_step\{role="trainer"\} 0/);
  });

  it("a real Prometheus scrapes every role", async () => {
    const dir = tempDir("agentrl-prometheus-");
    writeFileSync(join(dir, "token"), TOKEN);
    const jobs = [...targets].map(([role, url]) => {
      const { host, pathname } = new URL(url);
      return `  - job_name: ${JSON.stringify(role)}
    metrics_path: ${JSON.stringify(pathname)}
    authorization: { credentials_file: ${JSON.stringify(join(dir, "token"))} }
    static_configs: [{ targets: [${JSON.stringify(host)}] }]`;
    });
    writeFileSync(
      join(dir, "prometheus.yml"),
      `global: { scrape_interval: 1s, scrape_timeout: 1s }\nscrape_configs:\n${jobs.join("\n")}\n`,
    );
    execFileSync("promtool", ["check", "config", join(dir, "prometheus.yml")], { timeout: SYNC_TIMEOUT_MS });
    const port = await freePort();
    const server = spawn(
      "prometheus",
      [
        `--config.file=${join(dir, "prometheus.yml")}`,
        `--storage.tsdb.path=${join(dir, "data")}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      { stdio: "ignore" },
    );
    closers.push(
      () =>
        new Promise<void>((resolve) => {
          if (server.exitCode !== null) return resolve();
          server.once("exit", () => resolve());
          server.kill("SIGTERM");
        }),
    );
    const api = `http://127.0.0.1:${port}/api/v1`;
    type Targets = { data: { activeTargets: Array<{ labels: { job: string }; health: string; lastError: string }> } };
    let last: Targets["data"]["activeTargets"] = [];
    // until every target has been scraped successfully once (Prometheus scrapes each second)
    await waitFor(
      async () => {
        const response = await fetch(`${api}/targets`).catch(() => undefined);
        if (!response?.ok) return false;
        last = ((await response.json()) as Targets).data.activeTargets;
        return last.length === targets.size && last.every((t) => t.health === "up");
      },
      60_000,
      "every target up",
      250,
    ).catch(() => {
      throw new Error(`targets not all up: ${JSON.stringify(last.map((t) => [t.labels.job, t.health, t.lastError]))}`);
    });
    const query = async (promql: string) => {
      const response = await fetch(`${api}/query?query=${encodeURIComponent(promql)}`);
      return ((await response.json()) as { data: { result: Array<{ metric: Record<string, string> }> } }).data.result;
    };
    const up = await query("up == 1");
    expect(up.map((r) => r.metric.job).sort()).toEqual([...targets.keys()].sort());
    const sessions = await query('agentrl_controller_sessions{task="example"}');
    expect(sessions).toHaveLength(1);
  }, 120_000);
});
