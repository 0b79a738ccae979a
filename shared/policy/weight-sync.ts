import { AgentRlError } from "../errors.ts";
import { UpdateWeightsFromDiskResponse } from "../protocol/openai.ts";

/** The engine did not confirm new weights; the pool must keep routing to the version it had. */
export class WeightSyncError extends AgentRlError {
  override readonly name = "WeightSyncError";
}

/**
 * Tells an inference engine to load `version` from a Hugging Face folder it can read, the SGLang
 * way (`POST <root>/update_weights_from_disk {model_path, weight_version}`), and resolves only once
 * the engine answers `success: true`: a caller routes that version to the engine after this returns.
 * This project's policy server implements the same endpoint.
 * @example await updateWeightsFromDisk("http://sglang:30000", { modelPath: "/ckpt/policies/v7/hf", version: 7 })
 */
export async function updateWeightsFromDisk(
  engineUrl: string,
  update: { readonly modelPath: string; readonly version: number },
  options: { readonly timeoutMs?: number; readonly fetchImpl?: typeof fetch } = {},
): Promise<void> {
  const root = engineUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
  const url = `${root}/update_weights_from_disk`;
  let response: Response;
  try {
    response = await (options.fetchImpl ?? fetch)(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model_path: update.modelPath, weight_version: String(update.version) }),
      signal: AbortSignal.timeout(options.timeoutMs ?? 600_000),
    });
  } catch (error) {
    throw new WeightSyncError(`${url}: ${(error as Error).message}`, { cause: error });
  }
  const text = await response.text();
  let parsed: ReturnType<typeof UpdateWeightsFromDiskResponse.safeParse>;
  try {
    parsed = UpdateWeightsFromDiskResponse.safeParse(JSON.parse(text));
  } catch {
    throw new WeightSyncError(`${url}: HTTP ${response.status}, answer is not JSON: ${text.slice(0, 200)}`);
  }
  if (!parsed.success) throw new WeightSyncError(`${url}: HTTP ${response.status}: ${text.slice(0, 200)}`);
  if (!parsed.data.success)
    throw new WeightSyncError(`${url}: version ${update.version} not loaded: ${parsed.data.message}`);
}
