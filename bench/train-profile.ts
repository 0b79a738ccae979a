/**
 * `npx tsx bench/train-profile.ts` — one training configuration of bench:policy (8 × 256 tokens,
 * Adam, default model) alone: CPU time per step over TRAIN_STEPS steps (default 10), so a
 * `node --cpu-prof` run or a change to the training ops can be judged without the decode benches.
 */
import { loadavg } from "node:os";
import * as tf from "@tensorflow/tfjs";
import { ModelConfig } from "../shared/config/policy.ts";
import { createPolicy, initBackend } from "../shared/model/index.ts";

await initBackend((process.env.AGENTRL_BACKEND ?? "wasm") as "wasm");
const config = ModelConfig.parse({});
const policy = createPolicy(config, 1);
const tokensOf = (n: number, salt: number) =>
  Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104_729 + 13) % config.vocabSize);
const batch = Array.from({ length: 8 }, (_, i) => Int32Array.from(tokensOf(256, 100 + i)));
const loss = (logp: tf.Tensor2D) => tf.div(tf.neg(tf.sum(logp)), 8 * 256) as tf.Scalar;
const steps = Number(process.env.TRAIN_STEPS ?? 10);
for (let i = 0; i < 2; i++) policy.trainStep(batch, 1, loss);
const c0 = process.cpuUsage();
const t0 = performance.now();
for (let i = 0; i < steps; i++) policy.trainStep(batch, 1, loss);
const c = process.cpuUsage(c0);
const cpuMs = (c.user + c.system) / 1000 / steps;
console.log(
  `train step: ${cpuMs.toFixed(1)} ms cpu, ${((performance.now() - t0) / steps).toFixed(1)} ms wall (${steps} steps, load ${loadavg()[0]!.toFixed(2)})`,
);
