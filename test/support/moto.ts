import { type ChildProcess, spawn } from "node:child_process";
import { freePort } from "../../shared/net.ts";

/** A real moto server on 127.0.0.1, started and stopped by the test that needs it. */
export interface MotoServer {
  readonly endpoint: string;
  reset(): Promise<void>;
  stop(): Promise<void>;
}

/** Dummy credentials: moto accepts any, the SDK insists on some. */
export function setDummyAwsCredentials(): void {
  process.env.AWS_ACCESS_KEY_ID ??= "testing";
  process.env.AWS_SECRET_ACCESS_KEY ??= "testing";
  process.env.AWS_REGION ??= "us-east-1";
  // The SDK warns once per process that Node 20 support ends in 2027; it only clutters test and bench output.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
}

/**
 * Starts `python3 -m moto.server` on `port` (default: a free one) and waits until it answers
 * (slow to import on a busy machine). `host` is the address it binds (containers reach it at one
 * of the host's own).
 */
export async function startMoto(timeoutMs = 55_000, host = "127.0.0.1", port?: number): Promise<MotoServer> {
  setDummyAwsCredentials();
  port ??= await freePort();
  const endpoint = `http://${host}:${port}`;
  const child: ChildProcess = spawn("python3", ["-m", "moto.server", "-H", host, "-p", String(port)], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (chunk: Buffer) => {
    stderr = (stderr + chunk.toString()).slice(-4000);
  });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`moto server exited (${child.exitCode}): ${stderr}`);
    try {
      const response = await fetch(`${endpoint}/moto-api/`);
      if (response.ok || response.status < 500) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      child.kill("SIGKILL");
      throw new Error(`moto server did not start within ${timeoutMs} ms: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    endpoint,
    async reset() {
      await fetch(`${endpoint}/moto-api/reset`, { method: "POST" });
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = new Promise((r) => child.once("exit", r));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 3000))]);
      if (child.exitCode === null) child.kill("SIGKILL");
    },
  };
}
