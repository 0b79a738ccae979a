import { ModelConfig } from "../shared/config/policy.ts";
import { BACKEND_PREFERENCES, type BackendPreference } from "../shared/model/backend.ts";

/**
 * The model benches' shared flags: `--backend` (else AGENTRL_BACKEND, else auto) and `--model`.
 * A bad value ends the run (exit 2) with a message naming what is allowed.
 */

/**
 * The backend a bench runs on.
 * @example backendFlag(values.backend) // "webgpu" for "--backend webgpu"
 */
export function backendFlag(value: string | undefined): BackendPreference {
  const chosen = value ?? process.env.AGENTRL_BACKEND ?? "auto";
  const preference = BACKEND_PREFERENCES.find((p) => p === chosen);
  if (!preference) {
    const source = value === undefined ? "AGENTRL_BACKEND" : "--backend";
    console.error(`${source}=${chosen} is not allowed (${BACKEND_PREFERENCES.join(", ")})`);
    process.exit(2);
  }
  return preference;
}

/**
 * `default` is the project's default model (ModelConfig.parse({})); `small` is the tests' model
 * (d=32, 2 layers, 4/2 heads, vocab 300): a smoke run, e.g. on lavapipe, where the default is slow.
 */
export function modelFlag(value: string): ModelConfig {
  if (value === "default") return ModelConfig.parse({});
  if (value === "small")
    return ModelConfig.parse({
      vocabSize: 300,
      dModel: 32,
      layers: 2,
      heads: 4,
      kvHeads: 2,
      ffnHidden: 48,
      contextLength: 128,
    });
  console.error(`--model must be default or small, got "${value}"`);
  process.exit(2);
}
