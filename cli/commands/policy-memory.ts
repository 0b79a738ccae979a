import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Command } from "commander";
import type { ModelConfig } from "../../shared/config/policy.ts";
import { ValidationError } from "../../shared/errors.ts";
import { isHfFolder } from "../../shared/model/hf/base.ts";
import { modelConfigFromHf } from "../../shared/model/hf/config.ts";
import { estimateTrainingMemory, formatBytes } from "../../shared/model/memory.ts";
import { configFromOptions, withConfigOptions } from "../options.ts";

/** The model a run trains: policy.base's config.json when it names a downloaded Hugging Face folder, else policy.model. */
async function trainedModel(
  base: string | undefined,
  model: ModelConfig,
): Promise<{ model: ModelConfig; from: string }> {
  if (base === undefined || !existsSync(base) || !isHfFolder(base)) return { model, from: "policy.model" };
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(join(base, "config.json"), "utf8"));
  } catch (error) {
    throw new ValidationError("policy.base", [
      { path: "policy.base", message: `${base}/config.json is not valid JSON (${(error as Error).message})` },
    ]);
  }
  return { model: modelConfigFromHf(raw).model, from: `${base}/config.json` };
}

/** `agentrl policy estimate-memory`: device memory of one training step at the configured micro-batch. */
export function registerMemoryCommand(policy: Command): void {
  withConfigOptions(
    policy
      .command("estimate-memory")
      .description(
        "estimate one training step's device memory (weights, gradients, Adam moments, activations, logits) at trainer.microBatchTokens and rollout.maxTotalTokens",
      )
      .option("--json", "print the estimate as one JSON object"),
  ).action(async (options: { config?: string; set?: string[]; json?: boolean }) => {
    const config = await configFromOptions(options);
    const { model, from } = await trainedModel(config.policy.base, config.policy.model);
    const estimate = estimateTrainingMemory(model, {
      microBatchTokens: config.trainer.microBatchTokens,
      sequenceTokens: config.rollout.maxTotalTokens,
    });
    if (options.json) {
      process.stdout.write(`${JSON.stringify({ model: from, ...estimate })}\n`);
      return;
    }
    const { bytes } = estimate;
    const rows: Array<[string, number]> = [
      ["weights (float32)", bytes.weights],
      ["gradients (accumulator + micro-batch)", bytes.gradients],
      ["Adam moments (m, v)", bytes.adamMoments],
      [`activations (${estimate.microBatchTokens} tokens, sequences of ${estimate.sequenceLength})`, bytes.activations],
      ["logits, softmax, logit gradient", bytes.logits],
      ["total", bytes.total],
    ];
    const lines = [
      `model from ${from}: ${(estimate.parameters / 1e6).toFixed(1)}M parameters`,
      ...rows.map(([what, n]) => `${what.padEnd(64)} ${formatBytes(n).padStart(11)}`),
      "activations and logits scale with trainer.microBatchTokens; the optimizer step accumulates every micro-batch of a step's batch",
    ];
    process.stdout.write(`${lines.join("\n")}\n`);
  });
}
