import { readFileSync } from "node:fs";
import * as tf from "@tensorflow/tfjs";
import { beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  broadcastToTokens,
  DEFAULT_PPO_PARAMS,
  grpoAdvantages,
  normalizeByTask,
  ppoLoss,
} from "../../shared/rl/index.ts";
import { padRows, ppoLossTensors } from "../../shared/rl/tensor.ts";

/**
 * Reproduces ../shared/vectors/rl-math.json (copied to fixtures/ so every checkout has it):
 * GRPO advantages, task normalization and the PPO + KL loss, for the float64 array reference
 * (1e-6) and the float32 tensor version (1e-4), as its "conventions" state.
 */

const Matrix = z.array(z.array(z.number()));
const PpoExpected = z.object({ pg_loss: z.number(), kl_loss: z.number(), loss: z.number(), clip_frac: z.number() });
const Vectors = z.object({
  conventions: z.record(z.string(), z.string()),
  cases: z.array(
    z.object({
      name: z.string(),
      inputs: z.object({
        rewards: z.array(z.number()),
        group_ids: z.array(z.string()),
        tasks: z.array(z.string()),
        loss_mask: Matrix,
        logp: Matrix,
        old_logp: Matrix,
        ref_logp: Matrix,
      }),
      expected: z.object({
        grpo_advantage: z.array(z.number()),
        token_advantage_task_normalized: Matrix,
        ppo_with_grpo_advantage: PpoExpected,
        ppo_with_task_normalized_advantage: PpoExpected,
      }),
    }),
  ),
});

const vectors = Vectors.parse(JSON.parse(readFileSync(new URL("./fixtures/rl-math.json", import.meta.url), "utf8")));

function expectClose(actual: number, expected: number, absolute: number, relative: number): void {
  expect(Math.abs(actual - expected), `${actual} vs ${expected}`).toBeLessThanOrEqual(
    absolute + relative * Math.abs(expected),
  );
}

beforeAll(async () => {
  await tf.setBackend("cpu");
});

describe("rl-math.json vectors", () => {
  it("has the conventions the implementation follows", () => {
    expect(vectors.conventions.grpo).toContain("sample std");
    expect(vectors.conventions.task_normalization).toContain("population std");
    expect(vectors.cases.length).toBeGreaterThanOrEqual(3);
  });

  for (const c of vectors.cases) {
    const { inputs, expected } = c;
    const grpo = grpoAdvantages(inputs.rewards, inputs.group_ids);
    const grpoTokens = broadcastToTokens(grpo, inputs.loss_mask);
    const normalized = normalizeByTask(grpoTokens, inputs.loss_mask, inputs.tasks);

    describe(c.name, () => {
      it("GRPO advantages match within 1e-6", () => {
        grpo.forEach((a, i) => {
          expectClose(a, expected.grpo_advantage[i] as number, 1e-6, 0);
        });
      });

      it("task-normalized token advantages match within 1e-6", () => {
        normalized.forEach((row, b) => {
          row.forEach((a, t) => {
            expectClose(a, (expected.token_advantage_task_normalized[b] as number[])[t] as number, 1e-6, 0);
          });
        });
      });

      for (const [label, advantages, want] of [
        ["GRPO", grpoTokens, expected.ppo_with_grpo_advantage],
        ["task-normalized", normalized, expected.ppo_with_task_normalized_advantage],
      ] as const) {
        it(`PPO loss with ${label} advantages (array) matches within 1e-6 relative`, () => {
          const got = ppoLoss(
            {
              logp: inputs.logp,
              oldLogp: inputs.old_logp,
              refLogp: inputs.ref_logp,
              advantages,
              lossMask: inputs.loss_mask,
            },
            DEFAULT_PPO_PARAMS,
          );
          expectClose(got.pgLoss, want.pg_loss, 1e-12, 1e-6);
          expectClose(got.klLoss, want.kl_loss, 1e-12, 1e-6);
          expectClose(got.loss, want.loss, 1e-12, 1e-6);
          expectClose(got.clipFrac, want.clip_frac, 1e-12, 1e-9);
        });

        it(`PPO loss with ${label} advantages (tensor) matches within 1e-4 relative`, () => {
          const width = (inputs.loss_mask[0] as number[]).length;
          const tokenCount = inputs.loss_mask.flat().reduce((s, m) => s + m, 0);
          const values = tf.tidy(() => {
            const terms = ppoLossTensors(
              {
                logp: padRows(inputs.logp, width),
                oldLogp: padRows(inputs.old_logp, width),
                refLogp: padRows(inputs.ref_logp, width),
                advantages: padRows(advantages, width),
                lossMask: padRows(inputs.loss_mask, width),
              },
              DEFAULT_PPO_PARAMS,
              tokenCount,
            );
            return tf.stack([terms.loss, terms.pgSum, terms.klSum, terms.clippedCount]);
          });
          const [loss, pgSum, klSum, clipped] = Array.from(values.dataSync());
          values.dispose();
          expectClose(loss as number, want.loss, 1e-7, 1e-4);
          expectClose((pgSum as number) / tokenCount, want.pg_loss, 1e-7, 1e-4);
          expectClose((klSum as number) / tokenCount, want.kl_loss, 1e-7, 1e-4);
          expectClose((clipped as number) / tokenCount, want.clip_frac, 1e-9, 1e-6);
        });
      }
    });
  }
});
