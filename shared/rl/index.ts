/**
 * RL math of the learner: advantage estimators, task advantage normalization and the PPO loss,
 * each on plain arrays (reference) and, for the loss, as TF.js ops (tensor.ts, imported on its
 * own so array users never load TF.js).
 */
export * from "./advantages.ts";
export * from "./ppo.ts";
export * from "./random.ts";
