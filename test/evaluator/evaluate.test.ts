import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runEval } from "../../cli/launch/eval.ts";
import { exampleExpert, exampleRandom, exampleTask } from "../../env-images/example/index.ts";
import { type RunningController, startController } from "../../functions/controller/controller.ts";
import { evaluate, summarize } from "../../functions/evaluator/evaluate.ts";
import { ControllerClient, EnvCapacityError } from "../../shared/env/client.ts";
import { type RunningWorker, serveTask } from "../../shared/env/worker.ts";
import { scriptedPolicyServer } from "../support/scriptedPolicy.ts";

describe("evaluate", () => {
  let controller: RunningController;
  let worker: RunningWorker;
  const indices = Array.from({ length: 12 }, (_, i) => exampleTask.splits.test.start + i);

  beforeAll(async () => {
    controller = await startController({ port: 0 });
    worker = await serveTask(exampleTask, { controllerUrl: controller.url, heartbeatMs: 100 });
    await worker.heartbeat();
  });
  afterAll(async () => {
    await worker.close();
    await controller.close();
  });

  it("scores the expert at 100% and the random agent lower, with the reference's table fields", async () => {
    const expertPolicy = await scriptedPolicyServer(exampleExpert);
    const randomPolicy = await scriptedPolicyServer(exampleRandom);
    try {
      const common = { controllerUrl: controller.url, split: "test" as const, tasks: [{ name: "example", indices }] };
      const expert = await evaluate({
        ...common,
        policy: { url: `${expertPolicy.server.url}/v1` },
        policyLabel: "expert",
      });
      const random = await evaluate({
        ...common,
        policy: { url: `${randomPolicy.server.url}/v1` },
        policyLabel: "random",
      });
      expect(expert.tasks[0]).toMatchObject({ task: "example", episodes: 12, success: 1, meanReward: 1 });
      expect(expert.tasks[0]?.statuses).toEqual({ completed: 12 });
      expect(expert.averageSuccess).toBe(1);
      expect(random.tasks[0]?.episodes).toBe(12);
      expect(random.averageSuccess).toBeLessThan(1);
      expect(expertPolicy.state.requests).toBeGreaterThanOrEqual(12);
      // Greedy unless told otherwise.
      expect([...expertPolicy.state.temperatures]).toEqual([0]);
      expect([...expertPolicy.state.topPs]).toEqual([1]);
      expect(worker.sessionCount).toBe(0);
    } finally {
      await expertPolicy.server.close();
      await randomPolicy.server.close();
    }
  });

  it("samples at the temperature and top-p given, each instance k times with distinct seeds, and reports pass@k and the groups with mixed outcomes", async () => {
    const policy = await scriptedPolicyServer(exampleRandom);
    try {
      const report = await evaluate({
        controllerUrl: controller.url,
        split: "test",
        tasks: [{ name: "example", indices: indices.slice(0, 6) }],
        policy: { url: `${policy.server.url}/v1` },
        policyLabel: "random T=1 p=0.9 k=4",
        temperature: 1,
        topP: 0.9,
        samples: 4,
      });
      const row = report.tasks[0];
      expect(row).toMatchObject({ task: "example", episodes: 24, samples: 4 });
      expect([...policy.state.temperatures]).toEqual([1]);
      expect([...policy.state.topPs]).toEqual([0.9]);
      // Seeds index·k + s: 24 distinct ones.
      expect(policy.state.seeds).toEqual(
        new Set(indices.slice(0, 6).flatMap((i) => [0, 1, 2, 3].map((s) => i * 4 + s))),
      );
      expect(row?.passAtK).toBeGreaterThanOrEqual(row?.success ?? 1);
      expect(row?.mixedShare).toBeLessThanOrEqual(row?.passAtK ?? 0);
      expect(worker.sessionCount).toBe(0);
    } finally {
      await policy.server.close();
    }
  });

  it("writes every episode's conversation beside the report with --transcripts, in the report's order", async () => {
    const policy = await scriptedPolicyServer(exampleRandom);
    const outDir = mkdtempSync(join(tmpdir(), "agentrl-eval-transcripts-"));
    try {
      const common = {
        controllerUrl: controller.url,
        policyUrl: `${policy.server.url}/v1`,
        split: "test" as const,
        tasks: [{ name: "example", indices: indices.slice(0, 6) }],
        maxTokensPerTurn: 64,
        concurrency: 4,
        outDir,
      };
      const report = await runEval({ ...common, label: "random", transcripts: true });
      await runEval({ ...common, label: "plain" });
      expect(readdirSync(outDir).sort()).toEqual([
        "eval-plain.json",
        "eval-plain.md",
        "eval-random.json",
        "eval-random.md",
        "eval-random.transcripts.jsonl",
      ]);
      const lines = readFileSync(join(outDir, "eval-random.transcripts.jsonl"), "utf8").trimEnd().split("\n");
      const episodes = lines.map(
        (line) =>
          JSON.parse(line) as {
            task: string;
            index: number;
            success: number;
            turns: number;
            messages: { role: string }[];
          },
      );
      expect(episodes.map((e) => [e.task, e.index, e.success])).toEqual(
        report.outcomes?.map((o) => [o.task, o.index, o.success]),
      );
      for (const episode of episodes) {
        // The task's opening messages, then each reply followed by what the environment answered.
        expect(episode.messages.filter((m) => m.role === "assistant")).toHaveLength(episode.turns);
        expect(episode.messages[0]?.role).not.toBe("assistant");
      }
      expect(episodes.every((e) => e.turns >= 1)).toBe(true);
    } finally {
      await policy.server.close();
      rmSync(outDir, { recursive: true, force: true });
    }
  });

  it("waits for a free env slot instead of failing, up to its limit", async () => {
    // A second controller whose only worker has one slot, held by a session someone else started.
    const busyController = await startController({ port: 0 });
    const busyWorker = await serveTask(exampleTask, {
      controllerUrl: busyController.url,
      heartbeatMs: 100,
      concurrency: 1,
    });
    await busyWorker.heartbeat();
    const policy = await scriptedPolicyServer(exampleExpert);
    const env = new ControllerClient({ baseUrl: busyController.url });
    try {
      const common = {
        controllerUrl: busyController.url,
        split: "test" as const,
        tasks: [{ name: "example", indices: indices.slice(0, 2) }],
        policy: { url: `${policy.server.url}/v1` },
        policyLabel: "expert",
        retryBackoffMs: 50,
      };
      const held = await env.startSample("example", indices[0] as number);
      await expect(evaluate({ ...common, capacityWaitMs: 300 })).rejects.toBeInstanceOf(EnvCapacityError);
      expect(policy.state.requests).toBe(0);

      // Released half a second into the next evaluation: it waits, then plays both episodes.
      const released = new Promise<void>((resolve) =>
        setTimeout(() => void env.cancel(held.sessionId).then(resolve), 500),
      );
      const report = await evaluate(common);
      await released;
      expect(report.tasks[0]).toMatchObject({ episodes: 2, success: 1 });
    } finally {
      await policy.server.close();
      await busyWorker.close();
      await busyController.close();
    }
  });

  it("computes pass@k and the mixed share by hand", () => {
    const outcome = (index: number, sample: number, reward: number, status: "completed" | "task limit reached") => ({
      task: "db",
      index,
      sample,
      status,
      reward,
      turns: 1,
    });
    const report = summarize(
      "v1 T=1 k=3",
      "test",
      [{ name: "db", indices: [1, 2, 3, 4] }],
      [
        // 1: solved once of three; 2: never (a reward without completion does not count); 3: always; 4: never.
        outcome(1, 0, 0, "completed"),
        outcome(1, 1, 1, "completed"),
        outcome(1, 2, 0, "completed"),
        outcome(2, 0, 1, "task limit reached"),
        outcome(2, 1, 0, "completed"),
        outcome(2, 2, 0, "completed"),
        outcome(3, 0, 1, "completed"),
        outcome(3, 1, 1, "completed"),
        outcome(3, 2, 1, "completed"),
        outcome(4, 0, 0, "completed"),
        outcome(4, 1, 0, "completed"),
        outcome(4, 2, 0, "completed"),
      ],
      3,
    );
    expect(report.tasks[0]).toMatchObject({ episodes: 12, samples: 3, passAtK: 0.5, mixedShare: 0.25 });
    expect(report.tasks[0]?.success).toBeCloseTo(4 / 12, 12);
    const single = summarize("v1", "test", [{ name: "db", indices: [1] }], [outcome(1, 0, 1, "completed")]);
    expect(single.tasks[0]).not.toHaveProperty("passAtK");
  });

  it("counts a graded reward only for completed episodes and averages tasks unweighted", () => {
    const report = summarize(
      "v1",
      "test",
      [
        { name: "webshop", indices: [1, 2] },
        { name: "db", indices: [3] },
      ],
      [
        { task: "webshop", index: 1, sample: 0, status: "completed", reward: 0.5, turns: 3 },
        { task: "webshop", index: 2, sample: 0, status: "task limit reached", reward: 0.9, turns: 20 },
        { task: "db", index: 3, sample: 0, status: "completed", reward: 1, turns: 2 },
      ],
    );
    expect(report.tasks[0]).toMatchObject({ task: "webshop", success: 0.25, meanReward: 0.7, meanTurns: 11.5 });
    expect(report.tasks[1]).toMatchObject({ task: "db", success: 1 });
    expect(report.averageSuccess).toBeCloseTo(0.625, 12);
    // Every episode is kept, ordered by task and instance, scored as the table scores it.
    expect(report.outcomes).toEqual([
      { task: "db", index: 3, sample: 0, status: "completed", success: 1 },
      { task: "webshop", index: 1, sample: 0, status: "completed", success: 0.5 },
      { task: "webshop", index: 2, sample: 0, status: "task limit reached", success: 0 },
    ]);
  });
});
