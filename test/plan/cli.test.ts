import { describe, expect, it } from "vitest";
import { z } from "zod";
import { autoSteps, parsePlanFlags, splitWorkers } from "../../cli/commands/plan.ts";
import { agentrl } from "../support/cli.ts";

/** What `agentrl plan --json` promises to print: one line with at least these fields. */
const PlanLine = z.object({
  trajectoriesPerS: z.number().positive(),
  tokensPerS: z.number().positive(),
  trainedTokensPerS: z.number().positive(),
  bottleneck: z.string().min(1),
  costPer1MTrajectories: z.object({ onDemand: z.number().positive(), spot: z.number().positive() }),
  costPerHour: z.object({ onDemand: z.number().positive(), spot: z.number().positive() }),
  utilisation: z.record(z.string(), z.number().min(0).max(1)),
  staleness: z.object({
    histogram: z.array(z.number().int().min(0)),
    beyondBound: z.number().min(0).max(1),
    bound: z.number(),
  }),
  limits: z.array(z.object({ limit: z.string(), rate: z.number(), value: z.number(), share: z.number() })),
  truncated: z.literal(false),
});

describe("agentrl plan", () => {
  it("--json prints one line with throughput, tokens, the bottleneck, cost per 1M and utilisation per role", async () => {
    const result = await agentrl([
      "plan",
      "--env-workers",
      "20",
      "--policy-servers",
      "2",
      "--trainer-gpus",
      "8",
      "--steps",
      "8",
      "--json",
    ]);
    expect(result.stderr).toBe("");
    expect(result.status).toBe(0);
    const lines = result.stdout.trim().split("\n");
    expect(lines).toHaveLength(1);
    const line = PlanLine.parse(JSON.parse(lines[0] as string));
    for (const role of ["rollout workers", "controller", "policy servers", "trainer", "env workers (db)"])
      expect(Object.keys(line.utilisation)).toContain(role);
    // 20 env workers over the default mix of five equal tasks: 4 each
    expect(line.costPer1MTrajectories.spot).toBeLessThan(line.costPer1MTrajectories.onDemand);
  });

  it("prints the report without --json, naming the bottleneck and the price table's date", async () => {
    const result = await agentrl(["plan", "--env-workers", "10", "--steps", "6"]);
    expect(result.status).toBe(0);
    expect(result.stdout).toMatch(/^throughput: [\d.,]+ trajectories\/s/m);
    expect(result.stdout).toMatch(/^bottleneck: \S/m);
    expect(result.stdout).toMatch(/prices as of \d{4}-\d{2}-\d{2}/);
  });

  it.each([
    [["--env-workers", "ten"], /--env-workers: must be a whole number from 1 to 1,000,000 \(got "ten"\)/],
    [["--env-workers", "-3"], /--env-workers: must be a whole number from 1 to 1,000,000 \(got "-3"\)/],
    [["--trainer-gpus", "0"], /--trainer-gpus: must be at least 1 \(got "0"\)/],
    [["--policy-servers", "100001"], /--policy-servers: must be at most 100,000 \(got "100001"\)/],
    [["--decode", "a100"], /--decode: no profile "a100" in .*; allowed: tiny-cpu, default-cpu, vllm-8b-h100/],
    [
      ["--calibration", "/tmp/agentrl-no-such-calibration.json"],
      /--calibration: \/tmp\/agentrl-no-such-calibration.json does not exist/,
    ],
  ])("bad flags %j end with exit code 2 and say what is allowed", async (args, message) => {
    const result = await agentrl(["plan", ...args]);
    expect(result.status).toBe(2);
    expect(result.stderr).toMatch(message);
    expect(result.stdout).toBe("");
  });
});

describe("plan's helpers", () => {
  it("splits env workers by weight, at least one per task", () => {
    expect(splitWorkers(10, [1, 1, 3])).toEqual([2, 2, 6]);
    expect(splitWorkers(2, [1, 1, 1])).toEqual([1, 1, 1]);
  });

  it("simulates fewer steps for big batches, never under 4 nor over 20", () => {
    expect(autoSteps(64)).toBe(20);
    // 200,000 episodes / 16,000 per step = 12.5 -> 13
    expect(autoSteps(16_000)).toBe(13);
    expect(autoSteps(1_000_000)).toBe(4);
  });

  it("parses flags with zod, naming the flag", () => {
    expect(parsePlanFlags({ envWorkers: "12", json: true })).toMatchObject({
      envWorkers: 12,
      policyServers: 1,
      json: true,
    });
    expect(() => parsePlanFlags({ controllers: "-1" })).toThrow(/--controllers/);
  });
});
