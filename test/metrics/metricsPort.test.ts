import { type ChildProcess, spawn } from "node:child_process";
import { afterEach, describe, expect, it } from "vitest";

/**
 * AGENTRL_METRICS_PORT on a role with an HTTP server of its own (as ECS tasks set it): /metrics
 * is also served on that port, behind the scrape token, so a scraper never needs the API port.
 */
const TOKEN = "metrics-token-0123456789abcdef";
const children: ChildProcess[] = [];
afterEach(async () => {
  await Promise.all(
    children.splice(0).map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("exit", () => resolve());
          child.kill("SIGTERM");
        }),
    ),
  );
});

/** Starts `agentrl controller --port 0` with `env`; resolves with its output once `until` matches, or when it exits. */
function controller(env: NodeJS.ProcessEnv, until: RegExp): Promise<{ output: string; code: number | null }> {
  const child = spawn(process.execPath, ["bin/agentrl.mjs", "controller", "--port", "0"], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.push(child);
  return new Promise((resolve) => {
    let output = "";
    const take = (chunk: Buffer) => {
      output += chunk.toString();
      if (until.test(output)) resolve({ output, code: null });
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    child.once("exit", (code) => resolve({ output, code }));
  });
}

describe("a role's /metrics on a port of its own", () => {
  it("serves the role's metrics on AGENTRL_METRICS_PORT behind the token, apart from the API port", async () => {
    const { output } = await controller(
      { AGENTRL_METRICS_PORT: "0", AGENTRL_METRICS_HOST: "127.0.0.1", AGENTRL_METRICS_TOKEN: TOKEN },
      /"event":"metrics"[^\n]*\n/,
    );
    const api = /"event":"listening"[^\n]*"url":"([^"]+)"/.exec(output)?.[1];
    const metrics = /"event":"metrics"[^\n]*"url":"([^"]+)"/.exec(output)?.[1];
    expect(api).toBeDefined();
    expect(metrics).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    expect(new URL(metrics as string).port).not.toBe(new URL(api as string).port);
    expect((await fetch(metrics as string)).status).toBe(401);
    const scraped = await fetch(metrics as string, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(scraped.status).toBe(200);
    // the controller's own series, from the same registry as its API port's /metrics
    expect(await scraped.text()).toMatch(/^agentrl_process_cpu_user_seconds_total\{role="controller"\} /m);
    // the metrics port serves nothing of the API
    expect((await fetch(`${new URL(metrics as string).origin}/api/list_workers`)).status).toBe(404);
  }, 60_000);

  it("stops the role naming AGENTRL_METRICS_PORT when it is not a port", async () => {
    const { output, code } = await controller({ AGENTRL_METRICS_PORT: "nine" }, /$^/);
    expect(code).not.toBe(0);
    expect(output).toMatch(/AGENTRL_METRICS_PORT: must be a port number 0\.\.65535.*"nine"/);
  }, 60_000);
});
