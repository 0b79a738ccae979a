import { AgentRlError } from "../errors.ts";
import { UpdateWeightsFromDiskResponse } from "../protocol/openai.ts";
import { bearerHeader } from "../security/bearer.ts";

/** The engine did not confirm new weights; the pool must keep routing to the version it had. */
export class WeightSyncError extends AgentRlError {
  override readonly name = "WeightSyncError";
}

/** Transport options of a weight-sync call. */
export interface WeightSyncOptions {
  /** How long the engine may take to load. @default 600_000 */
  readonly timeoutMs?: number;
  readonly fetchImpl?: typeof fetch;
  /** Sent as `authorization: Bearer <apiKey>`. */
  readonly apiKey?: string;
}

/** The engine's root URL (an OpenAI base URL ending in /v1 is accepted too). */
function engineRoot(engineUrl: string): string {
  return engineUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
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
  options: WeightSyncOptions = {},
): Promise<void> {
  const url = `${engineRoot(engineUrl)}/update_weights_from_disk`;
  let response: Response;
  try {
    response = await (options.fetchImpl ?? fetch)(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearerHeader(options.apiKey) },
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

/**
 * Tells a vLLM server to reload its weights from disk, through the dev-mode endpoint
 * `POST /collective_rpc {"method": "reload_weights"}` (vLLM's api_server with
 * VLLM_SERVER_DEV_MODE=1; the worker's `reload_weights` re-reads the folder the engine was started
 * on, as vLLM's examples/offline_inference/skip_loading_weights_in_engine_init.py does). The caller
 * first replaces that folder's files with the new version. Resolves only on HTTP 2xx.
 * (vLLM's LoRA path, `POST /v1/load_lora_adapter {lora_name, lora_path}` with
 * VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, loads adapters, which this project's full-weight export is not.)
 */
export async function reloadVllmWeights(
  engineUrl: string,
  version: number,
  options: WeightSyncOptions = {},
): Promise<void> {
  const url = `${engineRoot(engineUrl)}/collective_rpc`;
  let response: Response;
  try {
    response = await (options.fetchImpl ?? fetch)(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...bearerHeader(options.apiKey) },
      body: JSON.stringify({ method: "reload_weights" }),
      signal: AbortSignal.timeout(options.timeoutMs ?? 600_000),
    });
  } catch (error) {
    throw new WeightSyncError(`${url}: ${(error as Error).message}`, { cause: error });
  }
  const text = await response.text().catch(() => "");
  if (response.status === 404)
    throw new WeightSyncError(`${url}: HTTP 404: start vLLM with VLLM_SERVER_DEV_MODE=1 to enable /collective_rpc`);
  if (!response.ok)
    throw new WeightSyncError(`${url}: version ${version} not loaded: HTTP ${response.status}: ${text.slice(0, 200)}`);
}
