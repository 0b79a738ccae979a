/**
 * The token-aligned arrays of one trajectory as they grow: context tokens (prompt, observations,
 * tokens without comparable log-probs) with loss mask 0, generated tokens with their behaviour and
 * full log-probs, version and pool with mask 1. The rollout worker's episodes and the gateway's
 * merged calls both build their Trajectories with it, so the two never drift apart.
 */
export class TokenLog {
  readonly tokenIds: number[] = [];
  readonly lossMask: Array<0 | 1> = [];
  /** Behaviour log-probs, of the kind `rollout.behaviorLogprobs` names. */
  readonly logprobs: number[] = [];
  /** Full-vocabulary log-probs (what the trainer recomputes). */
  readonly fullLogprobs: number[] = [];
  readonly policyVersion: number[] = [];
  readonly policyPool: Array<string | null> = [];

  /** Prompt / observation tokens (or tokens we have no behaviour log-probs for): mask 0. */
  context(ids: readonly number[], pool: string | null = null): void {
    for (const id of ids) {
      this.tokenIds.push(id);
      this.lossMask.push(0);
      this.logprobs.push(0);
      this.fullLogprobs.push(0);
      this.policyVersion.push(-1);
      this.policyPool.push(pool);
    }
  }

  /** Generated tokens with their behaviour and full log-probs and versions: mask 1. */
  generated(
    ids: readonly number[],
    behaviour: readonly number[],
    full: readonly number[],
    versions: readonly number[],
    pool: string,
  ): void {
    ids.forEach((id, i) => {
      this.tokenIds.push(id);
      this.lossMask.push(1);
      this.logprobs.push(behaviour[i] as number);
      this.fullLogprobs.push(full[i] as number);
      this.policyVersion.push(versions[i] as number);
      this.policyPool.push(pool);
    });
  }

  get length(): number {
    return this.tokenIds.length;
  }
}
