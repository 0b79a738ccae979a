/**
 * The numerics half of scripts/gpu-check: the same weights on the device backend and on TF.js's
 * cpu backend (plain JavaScript, the independent reference), compared on per-token log-probs and
 * on one training step's loss and gradient norm.
 */
import * as tf from "@tensorflow/tfjs";
import type { ModelConfig } from "../shared/config/policy.ts";
import { TransformerPolicy } from "../shared/model/transformer.ts";

/** Largest differences allowed against cpu (float32 everywhere; the device sums in another order). */
export interface Tolerances {
  /** Per-token log-prob, absolute. */
  readonly logProb: number;
  /** Loss and gradient norm, relative. */
  readonly relative: number;
}

/** What was measured, and whether it is within the tolerances. */
export interface NumericsReport {
  readonly logProbMaxAbs: number;
  readonly lossRel: number;
  readonly gradNormRel: number;
  readonly ok: boolean;
}

interface Run {
  readonly logProbs: Float32Array[];
  readonly loss: number;
  readonly gradNorm: number;
}

function run(config: ModelConfig, values: ReadonlyMap<string, Float32Array>, sequences: readonly Int32Array[]): Run {
  const tokens = sequences.reduce((n, s) => n + s.length, 0);
  const policy = new TransformerPolicy(config, values, 0, {
    trainable: true,
    optimizer: { learningRate: 1e-6, microBatchTokens: tokens },
  });
  try {
    const logProbs = policy.logProbs(sequences, 1);
    const { loss, gradNorm } = policy.trainStep(
      sequences,
      1,
      (logp) => tf.div(tf.neg(tf.sum(logp)), tokens) as tf.Scalar,
    );
    return { logProbs, loss, gradNorm };
  } finally {
    policy.dispose();
  }
}

/**
 * Runs `sequences` through a fresh policy on the current backend and on cpu, then switches back.
 * @example const report = await compareWithCpu(config, values, [Int32Array.of(1, 2, 3)], { logProb: 2e-3, relative: 1e-3 });
 */
export async function compareWithCpu(
  config: ModelConfig,
  values: ReadonlyMap<string, Float32Array>,
  sequences: readonly Int32Array[],
  tolerances: Tolerances,
): Promise<NumericsReport> {
  const device = tf.getBackend();
  const ours = run(config, values, sequences);
  await tf.setBackend("cpu");
  let reference: Run;
  try {
    reference = run(config, values, sequences);
  } finally {
    await tf.setBackend(device);
  }
  let logProbMaxAbs = 0;
  ours.logProbs.forEach((row, i) => {
    const other = reference.logProbs[i] as Float32Array;
    for (let t = 0; t < row.length; t++) logProbMaxAbs = Math.max(logProbMaxAbs, Math.abs(row[t]! - other[t]!));
  });
  const rel = (a: number, b: number) => Math.abs(a - b) / Math.max(Math.abs(b), 1e-12);
  const lossRel = rel(ours.loss, reference.loss);
  const gradNormRel = rel(ours.gradNorm, reference.gradNorm);
  const finite = [logProbMaxAbs, lossRel, gradNormRel].every(Number.isFinite);
  const ok =
    finite &&
    logProbMaxAbs <= tolerances.logProb &&
    lossRel <= tolerances.relative &&
    gradNormRel <= tolerances.relative;
  return { logProbMaxAbs, lossRel, gradNormRel, ok };
}
