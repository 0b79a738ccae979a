import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { gpuCheck } from "../../scripts/gpu-check.ts";
import { runProcess } from "../support/cli.ts";
import { writeTinyHfFolder } from "../support/hf-tiny.ts";
import { requireOrSkip, webgpuAdapterMissing } from "../support/requirements.ts";
import { tempDir } from "../support/tmp.ts";

const GPU_CHECK = fileURLToPath(new URL("../../scripts/gpu-check", import.meta.url));
const hasAdapter = requireOrSkip(
  "gpu-check-webgpu.test.ts",
  "scripts/gpu-check --backend webgpu",
  webgpuAdapterMissing(),
);

function tinyFolder(): string {
  const dir = join(tempDir("agentrl-gpu-check-webgpu-"), "tiny");
  writeTinyHfFolder(dir);
  return dir;
}

describe.skipIf(!hasAdapter)("scripts/gpu-check --backend webgpu (lavapipe here)", () => {
  it("reports the adapter and its limits, numerics against cpu, train and decode rates, and exits 0", async () => {
    const run = await runProcess(
      GPU_CHECK,
      ["--backend", "webgpu", tinyFolder(), "--steps", "1", "--tokens", "16", "--batch", "2"],
      { timeoutMs: 240_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/backend webgpu from @tensorflow\/tfjs-backend-webgpu \(Dawn\)/);
    expect(run.stdout).toMatch(/adapter .+ \/ .+ \/ ".+" \(fallback adapter: (yes|no)\)/);
    expect(run.stdout).toMatch(
      /limits maxBufferSize=\d+ maxStorageBufferBindingSize=\d+ maxStorageBuffersPerShaderStage=\d+/,
    );
    expect(run.stdout).toMatch(
      /numerics vs cpu \(12 \+ 6 tokens\): log-prob max \|diff\| [\d.e+-]+ \(allowed 0\.002\), loss rel [\d.e+-]+, grad norm rel [\d.e+-]+ \(allowed 0\.001\): ok/,
    );
    expect(run.stdout).toMatch(/train step 1: [\d.]+ s, \d+ tokens\/s, loss [\d.]+, [\d.]+ GFLOP\/s/);
    expect(run.stdout).toMatch(/decode 2 × 64 tokens: \d+ tokens\/s, [\d.]+ GFLOP\/s/);
    expect(run.stdout).toMatch(/gpu-check: ready\n/);
  }, 300_000);

  it("exits 4 when the numerics exceed the tolerance (here: exactly equal to cpu required)", async () => {
    const run = await runProcess(GPU_CHECK, ["--backend", "webgpu", tinyFolder(), "--logprob-tolerance", "0"], {
      timeoutMs: 240_000,
    });
    expect(run.status).toBe(4);
    expect(run.stdout).toMatch(/\(allowed 0\), .*: MISMATCH/);
    expect(run.stderr).toMatch(/numerics on this backend do not match the cpu backend's/);
    expect(run.stdout).not.toMatch(/train step/);
  }, 300_000);
});

describe("scripts/gpu-check arguments", () => {
  it("refuses an unknown backend and --cpu-dry-run with webgpu, naming what is allowed", async () => {
    const errors: string[] = [];
    const io = { out: () => {}, err: (text: string) => errors.push(text) };
    expect(await gpuCheck(["--backend", "metal"], io)).toBe(1);
    expect(await gpuCheck(["--backend", "webgpu", "--cpu-dry-run"], io)).toBe(1);
    expect(await gpuCheck(["--backend", "webgpu", "--logprob-tolerance=-1"], io)).toBe(1);
    expect(errors.join("")).toMatch(/--backend must be one of tensorflow, webgpu, got "metal"/);
    expect(errors.join("")).toMatch(/--cpu-dry-run is for --backend tensorflow/);
    expect(errors.join("")).toMatch(/--logprob-tolerance must be a number >= 0, got "-1"/);
  });
});
