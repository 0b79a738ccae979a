import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { OsSummary, parseSummary } from "../../bench/summary.ts";
import { stdModule } from "../../env-images/osbench/index.ts";
import { loadOs } from "../../env-images/osbench/instances.ts";
import { ContainerBackend, detectContainerCli, WORKER_ID, WORKER_LABEL } from "../../env-images/osbench/sandbox.ts";
import { createOsTask } from "../../env-images/osbench/task.ts";
import { AGENTBENCH_OS_IMAGES } from "../../shared/agentbench/osImages.ts";
import { scriptedStats } from "../../shared/env/session.ts";
import { runProcess, SYNC_TIMEOUT_MS } from "../support/cli.ts";
import { agentBenchDataDir, requireOrSkip } from "./support.ts";

/**
 * os-std episodes end to end in containers: upstream's example solves the instance through the
 * tools, a wrong answer scores 0, and no container outlives its episode.
 */
const cli = await detectContainerCli();
const imageBuilt =
  cli !== undefined &&
  spawnSync(cli, ["image", "inspect", AGENTBENCH_OS_IMAGES.default], { stdio: "ignore", timeout: SYNC_TIMEOUT_MS })
    .status === 0;
const ready = requireOrSkip("os-task.test.ts", "os-std episodes in containers", [
  ...(agentBenchDataDir() ? [] : ["no AgentBench data (run `agentrl data fetch agentbench`)"]),
  ...(cli ? [] : ["neither podman nor a Docker daemon (apt-get install podman runc)"]),
  ...(cli && !imageBuilt ? ["AgentBench's default image is not built (npm run images -- --agentbench-os)"] : []),
]);

const mine = () =>
  spawnSync(cli!, ["ps", "-a", "--filter", `label=${WORKER_LABEL}=${WORKER_ID}`, "--format", "{{.Names}}"], {
    encoding: "utf8",
    timeout: SYNC_TIMEOUT_MS,
  }).stdout.trim();

describe.skipIf(!ready)("os-std in containers", () => {
  it("the expert solves a check instance, a match instance and one with a start script; nothing is left", async () => {
    const std = loadOs("os-std");
    const match = std.find((i) => i.evaluation.kind === "match")!;
    const started = std.find((i) => i.start !== undefined)!;
    const stats = await scriptedStats(stdModule.task, stdModule.expert, [0, match.index, started.index]);
    expect(stats.misses).toEqual([]);
    expect(stats.successes).toBe(3);
    expect(mine()).toBe("");
  }, 180_000);

  it("a wrong answer scores 0, and closing the episode removes its container", async () => {
    const episode = await stdModule.task.start(0, new AbortController().signal);
    expect(mine()).not.toBe("");
    const signal = new AbortController().signal;
    const looked = await episode.call("bash_action", { script: "ls /usr | head -3" }, signal);
    expect(looked.observation).toMatch(/^The output of the OS:\n\n/);
    const result = await episode.call("answer_action", { answer: "certainly not this" }, signal);
    expect(result.reward?.reward).toBe(0);
    expect(result.finish).toBe("completed");
    await episode.close?.();
    expect(mine()).toBe("");
  }, 180_000);

  it("an agent that fills the disk past the cap ends its episode as an invalid action", async () => {
    const backend = new ContainerBackend(cli!, undefined, { diskBytes: 32 << 20, pollMs: 200 });
    const task = createOsTask("os-std", { backend });
    const episode = await task.start(0, new AbortController().signal);
    const signal = new AbortController().signal;
    try {
      const fill = "for i in 1 2 3 4; do dd if=/dev/zero of=/root/f$i bs=1M count=24 2>/dev/null; done; sleep 20";
      const first = await episode.call("bash_action", { script: fill }, signal);
      // the cap may be seen while the command runs or just after it: the next call ends the episode then
      const result = first.finish ? first : await episode.call("bash_action", { script: "ls" }, signal);
      expect(result.finish).toBe("agent invalid action");
      expect(result.observation).toMatch(/more than 33554432 bytes to the container's disk: the episode ends\.$/);
    } finally {
      await episode.close?.();
    }
    expect(mine()).toBe("");
  }, 180_000);

  it("bench:os times episodes at each concurrency and ends with its JSON summary", async () => {
    const run = await runProcess(
      process.execPath,
      ["--import", "tsx", "bench/os.ts", "--episodes", "2", "--concurrency", "1,2"],
      {
        timeoutMs: 120_000,
      },
    );
    expect(run.status, run.stderr).toBe(0);
    const summary = parseSummary(OsSummary, run.stdout);
    expect(summary).toMatchObject({ task: "os-std", episodes: 2, expertSolved: 4, episodesPerMin4: null });
    expect(summary.episodesPerMin1).toBeGreaterThan(0);
    expect(summary.episodesPerMin2).toBeGreaterThan(0);
    expect(summary.startP50Ms).toBeGreaterThan(0);
    expect(run.stdout).toMatch(/skipped 3 instances \(52, 53, 55\)/);
    const refused = await runProcess(process.execPath, ["--import", "tsx", "bench/os.ts", "--concurrency", "0"], {
      timeoutMs: 60_000,
    });
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(
      /--concurrency: .*\nusage: npm run bench:os -- .*\[--concurrency a list such as 1,2,4\]/,
    );
    expect(mine()).toBe("");
  }, 180_000);
});
