import type { Logger } from "../../shared/log.ts";
import type { InferencePolicy } from "../../shared/model/types.ts";
import { type Pool, targetVersion } from "../../shared/policy/pool.ts";

export { type Pool, targetVersion };

/**
 * Where versions come from (the checkpoint store in production, a map in tests).
 * `newestVersion` must be cheap: it is called every poll.
 */
export interface PolicySource {
  /** Newest complete version (its manifest exists), or undefined when there is none yet. */
  newestVersion(): Promise<number | undefined>;
  /** Loads one version's weights. */
  load(version: number): Promise<InferencePolicy>;
}

/**
 * Follows the checkpoint store by POLLING the newest manifest, not by consuming PolicyPublished
 * events. Why: a queue message is read by one consumer, but every policy server (and the
 * evaluator) must see every version; polling needs no per-reader queue or SNS fan-out, works the
 * same on the local directory store and S3 (one cheap LIST/GET every pollSeconds), and a server
 * that starts late or restarts finds the newest version by itself. Latency is one poll interval,
 * small next to a training step.
 */
export class CheckpointFollower {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  /** The install under way, if any (settles either way). */
  private installing: Promise<void> | undefined;

  constructor(
    private readonly source: PolicySource,
    private readonly options: {
      readonly pool: Pool;
      readonly staleEvery: number;
      /** trainer.checkpointEvery: only every N-th version is published. @default 1 */
      readonly publishEvery?: number;
      readonly pollSeconds: number;
      /** Version currently served. */
      readonly currentVersion: () => number;
      /** Installs a loaded policy (between decode steps); resolves when the old one may be freed. */
      readonly install: (policy: InferencePolicy) => Promise<void>;
      readonly log?: Logger;
    },
  ) {}

  start(): void {
    const tick = () => {
      if (this.stopped) return;
      this.pollOnce()
        .catch((error: unknown) => {
          if (this.stopped) this.options.log?.info({ err: error }, "checkpoint poll abandoned: the server is stopping");
          else this.options.log?.warn({ err: error }, "checkpoint poll failed; retrying");
        })
        .finally(() => {
          if (!this.stopped) this.timer = setTimeout(tick, this.options.pollSeconds * 1000);
        });
    };
    this.timer = setTimeout(tick, this.options.pollSeconds * 1000);
  }

  /** One poll: loads and installs the pool's target version if it is newer than the one served. */
  async pollOnce(): Promise<number | undefined> {
    const newest = await this.source.newestVersion();
    if (newest === undefined) return undefined;
    const target = targetVersion(this.options.pool, newest, this.options.staleEvery, this.options.publishEvery);
    if (target <= this.options.currentVersion()) return undefined;
    const policy = await this.source.load(target);
    if (this.stopped) {
      policy.dispose();
      return undefined;
    }
    const installing = this.options.install(policy);
    this.installing = installing.then(
      () => undefined,
      () => undefined,
    );
    try {
      await installing;
    } finally {
      this.installing = undefined;
    }
    this.options.log?.info({ policyVersion: target, newest, pool: this.options.pool }, "serving new policy version");
    return target;
  }

  /**
   * Stops polling. Resolves at once while a version is still loading (it is disposed when it
   * arrives, never installed: a slow or hung store cannot hold a shutdown), or when an install under
   * way settles: the server confirms or, stopping, refuses it, so close the server without waiting
   * for this first.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.installing;
  }
}
