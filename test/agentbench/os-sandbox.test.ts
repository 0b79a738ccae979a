import { spawn, spawnSync } from "node:child_process";
import { rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CONTAINER_WORKER,
  ContainerBackend,
  detectContainerCli,
  type Sandbox,
  WORKER_ID,
  workerIdentity,
} from "../../env-images/osbench/sandbox.ts";
import { AGENTBENCH_OS_IMAGES } from "../../shared/agentbench/osImages.ts";
import { SYNC_TIMEOUT_MS } from "../support/cli.ts";
import { requireOrSkip } from "./support.ts";

/**
 * OS episodes' sandboxes on a real container engine: one container per episode with upstream's
 * limits, a persistent root shell, isolation between episodes, and no container left behind.
 * Runs in AgentBench's `default` image when built (`npm run images -- --agentbench-os`), else in
 * node:20-bookworm-slim (the CPU images' base; any Debian with bash does here).
 */
const cli = await detectContainerCli();
const imageOf = (bin: string): string | undefined =>
  [AGENTBENCH_OS_IMAGES.default, "docker.io/library/node:20-bookworm-slim"].find(
    (image) => spawnSync(bin, ["image", "inspect", image], { stdio: "ignore", timeout: SYNC_TIMEOUT_MS }).status === 0,
  );
const image = cli ? imageOf(cli) : undefined;
const ready = requireOrSkip("os-sandbox.test.ts", "OS sandboxes in containers", [
  ...(cli ? [] : ["neither podman nor a Docker daemon (apt-get install podman runc)"]),
  ...(cli && !image ? ["no Debian image with bash (npm run images -- --agentbench-os)"] : []),
]);

const text = (bytes: Uint8Array) => Buffer.from(bytes).toString("utf8");
const containersNamed = (bin: string, name: string) =>
  spawnSync(bin, ["ps", "-a", "--filter", `name=^${name}$`, "--format", "{{.Names}}"], {
    encoding: "utf8",
    timeout: SYNC_TIMEOUT_MS,
  }).stdout.trim();

describe.skipIf(!ready)("container sandboxes", () => {
  const backend = new ContainerBackend(cli ?? "podman", { idleMs: 2_000, totalMs: 20_000, maxBytes: 1 << 16 });
  let a: Sandbox;
  let b: Sandbox;
  beforeAll(async () => {
    [a, b] = await Promise.all([
      backend.start({ image: image!, network: false, task: "test" }),
      backend.start({ image: image!, network: false, task: "test" }),
    ]);
  }, 120_000);
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
  });

  it("the shell is root's, in /root, and keeps cwd, variables and background jobs between commands", async () => {
    const shell = a.shell();
    expect(text((await shell.run("whoami; pwd")).output)).toBe("root\n/root\n");
    await shell.run("cd /tmp; export X=41; sleep 300 &");
    const after = await shell.run("pwd; echo $((X + 1)); jobs | wc -l");
    expect(text(after.output)).toBe("/tmp\n42\n1\n");
    expect(after.ended).toBe("sentinel");
  }, 60_000);

  it("waits for the command's end, not a fixed time; status and stderr come back in order", async () => {
    const shell = a.shell();
    const slow = await shell.run("sleep 1; echo out; echo err >&2; false");
    expect(text(slow.output)).toBe("out\nerr\n");
    expect(slow.exitCode).toBe(1);
    expect(text((await shell.run("printf 'no newline'")).output)).toBe("no newline");
  }, 60_000);

  it("a command quiet for longer than the limit returns; its late output opens the next observation", async () => {
    const shell = a.shell();
    const quiet = await shell.run("sleep 3; echo late");
    expect(quiet.ended).toBe("idle");
    expect(text(quiet.output)).toBe("");
    expect(text((await shell.run("echo next")).output)).toBe("late\nnext\n");
  }, 60_000);

  it("su carries over: later commands run as the user until exit", async () => {
    const shell = a.shell();
    await shell.run("useradd -m agentuser");
    await shell.run("su agentuser");
    expect(text((await shell.run("whoami; cd ~; pwd")).output)).toBe("agentuser\n/home/agentuser\n");
    await shell.run("exit");
    expect(text((await shell.run("whoami")).output)).toBe("root\n");
  }, 60_000);

  it("scripts run apart from the shell with their arguments; episodes do not see each other", async () => {
    await a.shell().run("echo secret > /root/only-a");
    const inA = await a.run(["bash", "-c", 'cat /root/only-a; echo "$1"', "--", "arg"]);
    expect(text(inA.stdout)).toBe("secret\narg\n");
    const inB = await b.run(["bash", "-c", "cat /root/only-a"]);
    expect(inB.exitCode).not.toBe(0);
  }, 60_000);

  it("no network, 1 GB of memory, a process cap", async () => {
    expect(text((await a.run(["ls", "/sys/class/net"])).stdout)).toBe("lo\n");
    const limits = await a.run([
      "bash",
      "-c",
      "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; " +
        "cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max",
    ]);
    expect(text(limits.stdout)).toBe("1073741824\n512\n");
  }, 60_000);

  it("process floods stop at the cap; `kill -9 -1` ends everything but the shell and the container", async () => {
    const shell = b.shell();
    expect((await shell.run("true")).exitCode).toBe(0);
    const flood = await b.run(
      ["timeout", "10", "bash", "-c", "for i in $(seq 1 700); do setsid sleep 120 & done 2>/dev/null"],
      {
        timeoutMs: 30_000,
      },
    );
    expect(flood.exitCode).not.toBe(0);
    const count = await b.run(["bash", "-c", "ls -d /proc/[0-9]* | wc -l"]);
    expect(Number(text(count.stdout).trim())).toBeLessThanOrEqual(512);
    // Linux spares the caller of kill(-1) and pid 1: the shell and the container's keeper live on.
    expect((await shell.run("kill -9 -1")).ended).toBe("sentinel");
    // /bin/echo is a new process: the cap has room again.
    expect(text((await shell.run("/bin/echo alive")).output)).toBe("alive\n");
  }, 120_000);

  it("close removes the container", async () => {
    const c = await backend.start({ image: image!, network: false, task: "test" });
    expect(containersNamed(cli!, c.id)).toBe(c.id);
    await c.close();
    expect(containersNamed(cli!, c.id)).toBe("");
  }, 120_000);

  it("a killed worker's container is removed by the next worker's sweep", async () => {
    const child = spawn(process.execPath, ["--import", "tsx", "test/agentbench/fixtures/os-orphan.ts", cli!, image!], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const id = await new Promise<string>((resolve, reject) => {
      child.stdout.once("data", (chunk: Buffer) => resolve(chunk.toString().trim()));
      child.once("exit", () => reject(new Error("orphan fixture exited early")));
    });
    expect(containersNamed(cli!, id)).toBe(id);
    child.kill("SIGKILL");
    await new Promise((resolve) => child.once("exit", resolve));
    expect(await backend.sweepOrphans()).toBeGreaterThanOrEqual(1);
    expect(containersNamed(cli!, id)).toBe("");
  }, 120_000);

  it("an ECS worker's containers, labelled with its own container, are swept once that container is gone", async () => {
    // The "worker task" is a container of this engine, as an ECS worker's is on its host's daemon.
    const worker = await backend.start({ image: image!, network: false, task: "test" });
    const ecsWorker = new ContainerBackend(cli!, undefined, {}, `${CONTAINER_WORKER}${worker.id}`);
    const episode = await ecsWorker.start({ image: image!, network: false, task: "test" });
    try {
      await backend.sweepOrphans();
      expect(containersNamed(cli!, episode.id)).toBe(episode.id);
      await worker.close();
      expect(await backend.sweepOrphans()).toBeGreaterThanOrEqual(1);
      expect(containersNamed(cli!, episode.id)).toBe("");
    } finally {
      await Promise.all([worker.close(), episode.close()]);
    }
  }, 120_000);

  it("reads nothing of the host: its files, its processes, its disks, its hostname; mounting is refused", async () => {
    const marker = join(tmpdir(), `agentrl-host-marker-${process.pid}`);
    writeFileSync(marker, "host secret\n");
    try {
      const probe = await a.run([
        "bash",
        "-c",
        `cat ${marker}; echo "marker=$?"; tr '\\0' ' ' </proc/1/cmdline; echo; ` +
          "ls /dev | grep -cE '^(sd|vd|nvme|xvd)' ; hostname; mount -t proc proc /mnt 2>/dev/null; echo \"mount=$?\"",
      ]);
      const [marked, keeper, disks, name, mounted] = text(probe.stdout).trim().split("\n");
      expect(marked).toMatch(/^marker=[1-9]/);
      expect(keeper).toMatch(/^\/bin\/bash -c while :; do sleep 3600 & wait; done/);
      expect(disks).toBe("0");
      expect(name).not.toBe(hostname());
      expect(mounted).toMatch(/^mount=[1-9]/);
    } finally {
      rmSync(marker, { force: true });
    }
  }, 60_000);

  it("a file stops growing at the disk cap, and a layer past it stops every process of the episode", async () => {
    // the file cap alone first: a watch that never reads in time
    const fileCapped = new ContainerBackend(cli ?? "podman", undefined, { diskBytes: 32 << 20, pollMs: 3_600_000 });
    const f = await fileCapped.start({ image: image!, network: false, task: "test" });
    try {
      const one = await f.run([
        "bash",
        "-c",
        "dd if=/dev/zero of=/root/big bs=1M count=64 2>/dev/null; echo $?; stat -c %s /root/big",
      ]);
      const [status, size] = text(one.stdout).trim().split("\n");
      // past RLIMIT_FSIZE the kernel stops dd with SIGXFSZ (25): exit status 128 + 25
      expect(status).toBe("153");
      expect(Number(size)).toBe(32 << 20);
    } finally {
      await f.close();
    }

    const capped = new ContainerBackend(cli ?? "podman", undefined, { diskBytes: 32 << 20, pollMs: 300 });
    const c = await capped.start({ image: image!, network: false, task: "test" });
    try {
      expect((await c.shell().run("echo small")).exitCode).toBe(0);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      expect(c.limitExceeded).toBeUndefined();
      const shell = c.shell();
      await shell.run("for i in 1 2 3; do dd if=/dev/zero of=/root/f$i bs=1M count=24 2>/dev/null; done; sleep 30");
      await waitUntil(() => c.limitExceeded !== undefined, 20_000);
      expect(c.limitExceeded).toMatch(/more than 33554432 bytes/);
      // the episode's shell and its sleep were killed; the container's keeper lives on
      const left = await c.run([
        "bash",
        "-c",
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done",
      ]);
      expect(text(left.stdout)).not.toMatch(/^(sleep 30|dd) /m);
      expect((await c.run(["true"])).exitCode).toBe(0);
    } finally {
      await c.close();
    }
  }, 120_000);
});

async function waitUntil(check: () => boolean, timeoutMs: number): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !check(); ) {
    if (Date.now() > deadline) throw new Error(`not true within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe("workerIdentity", () => {
  /** A local stand-in for the ECS task metadata endpoint (v4): the container's own document. */
  async function metadataEndpoint(status: number, body: unknown): Promise<{ url: string; close: () => void }> {
    const server = createServer((_request, response) => {
      response.writeHead(status, { "content-type": "application/json" });
      response.end(JSON.stringify(body));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return { url: `http://127.0.0.1:${port}/v4/abc`, close: () => server.close() };
  }

  it("is host and pid outside ECS", async () => {
    expect(await workerIdentity({})).toBe(WORKER_ID);
    expect(WORKER_ID).toBe(`${hostname()}:${process.pid}`);
  });

  it("is the worker's own Docker container on ECS", async () => {
    const dockerId = "3f2a9c0d1e4b5a6f7081928374655647382910abcdef0123456789abcdef0123";
    const endpoint = await metadataEndpoint(200, { DockerId: dockerId, Name: "Role", Labels: {} });
    try {
      expect(await workerIdentity({ ECS_CONTAINER_METADATA_URI_V4: endpoint.url })).toBe(`container:${dockerId}`);
    } finally {
      endpoint.close();
    }
  });

  it("says what was wrong when the endpoint gives no container id", async () => {
    const endpoint = await metadataEndpoint(200, { Name: "Role" });
    try {
      await expect(workerIdentity({ ECS_CONTAINER_METADATA_URI_V4: endpoint.url })).rejects.toThrow(
        /gave no DockerId: DockerId: /,
      );
    } finally {
      endpoint.close();
    }
    const failing = await metadataEndpoint(500, {});
    try {
      await expect(workerIdentity({ ECS_CONTAINER_METADATA_URI_V4: failing.url })).rejects.toThrow(/answered 500/);
    } finally {
      failing.close();
    }
  });
});
