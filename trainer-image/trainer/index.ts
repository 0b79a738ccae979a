/** The trainer role: group buffer, staleness, advantages, PPO step, versioned publishing. */
export * from "./batch.ts";
export * from "./buffer.ts";
export * from "./ledger.ts";
export * from "./trainer.ts";
