import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TransportConfig } from "../../shared/config/transport.ts";
import { createTransport } from "../../shared/transport/index.ts";
import type { Transport } from "../../shared/transport/types.ts";

/**
 * What the shared suites need to know about one implementation: how to make a fresh, isolated
 * config (its own temp folder, or its own queue prefix and buckets on the moto server).
 */
export interface TransportTarget {
  readonly kind: "local" | "aws";
  /**
   * A stale receipt handle (from an earlier delivery) can neither delete nor change the new
   * delivery. True for local. SQS only says such a delete "might not" take effect, and moto does
   * delete, so the suite checks this only where it is promised.
   */
  readonly perDeliveryReceipts: boolean;
  /**
   * Concurrent putIfAbsent calls on one key have exactly one winner. True for local (link()) and
   * for S3 (`If-None-Match: *`); false for moto 5.2.1, whose server checks for the key and then
   * writes without a lock, so two racing requests can both succeed (measured: 1 round in 60 of 12
   * racing writers). The suite then checks only that a winner's body is what stays.
   */
  readonly atomicPutIfAbsent: boolean;
  /** A fresh isolated config; `overrides` set maxReceiveCount, visibility etc. */
  freshConfig(overrides?: Partial<TransportConfig>): Promise<TransportConfig>;
  /** Removes what freshConfig made (temp folders). */
  cleanup(): Promise<void>;
}

/** Local target: a new temp folder per config. */
export function localTarget(): TransportTarget {
  const dirs: string[] = [];
  return {
    kind: "local",
    perDeliveryReceipts: true,
    atomicPutIfAbsent: true,
    async freshConfig(overrides = {}) {
      const dir = await mkdtemp(join(tmpdir(), "agentrl-transport-"));
      dirs.push(dir);
      return TransportConfig.parse({ visibilityTimeoutSeconds: 30, ...overrides, kind: "local", localDir: dir });
    },
    async cleanup() {
      await Promise.all(dirs.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
    },
  };
}

let awsCounter = 0;

/** AWS-API target at `endpoint()` (a moto server): a unique queue prefix and bucket pair per config. */
export function awsTarget(endpoint: () => string): TransportTarget {
  return {
    kind: "aws",
    perDeliveryReceipts: false,
    atomicPutIfAbsent: false,
    async freshConfig(overrides = {}) {
      const unique = `t${process.pid}-${++awsCounter}-${Math.random().toString(36).slice(2, 8)}`;
      return TransportConfig.parse({
        visibilityTimeoutSeconds: 30,
        ...overrides,
        kind: "aws",
        endpoint: endpoint(),
        queuePrefix: unique,
        trajectoryBucket: `${unique}-trajectories`,
        checkpointBucket: `${unique}-checkpoints`,
      });
    },
    async cleanup() {},
  };
}

/** Opens a transport for `config`, creating aws resources on the moto endpoint. */
export function openTransport(config: TransportConfig): Promise<Transport> {
  return createTransport(config, { ensureResources: config.kind === "aws" });
}
