import { isMainThread } from "node:worker_threads";
import * as tf from "@tensorflow/tfjs";
import { defineShardLoss } from "../../shared/model/dataParallel.ts";

/**
 * A test shard loss: the mean log-prob loss of bench/policy.ts, which can make a replica thread
 * die (`exitInReplica`, as a crash would: the thread ends without a reply) or throw
 * (`throwInReplica`, an ordinary failure answered with a message) while building its shard.
 */
export interface CrashInput {
  readonly tokens: number;
  readonly exitInReplica?: boolean;
  readonly throwInReplica?: boolean;
}

export default defineShardLoss<CrashInput, { calls: number }>(import.meta.url, {
  build: (input) => {
    if (!isMainThread && input.exitInReplica) process.exit(7);
    if (!isMainThread && input.throwInReplica) throw new Error("loss refused in the replica");
    let calls = 0;
    return {
      loss: (logp) => {
        calls += 1;
        return tf.div(tf.neg(tf.sum(logp)), input.tokens) as tf.Scalar;
      },
      stats: () => ({ calls }),
    };
  },
  merge: (a, b) => ({ calls: a.calls + b.calls }),
});
