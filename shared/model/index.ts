/** The policy model: backend selection, transformer, KV-cache decoder, checkpoints. */
export {
  type BackendInfo,
  type BackendPreference,
  BackendUnavailableError,
  backendInfo,
  initBackend,
} from "./backend.ts";
// The checkpoint layout (versions, manifests) is shared/protocol/checkpoints.ts, loadable without TF.js.
export {
  type LoadCheckpointOptions,
  type LoadedCheckpoint,
  loadCheckpoint,
  type SaveCheckpointOptions,
  saveCheckpoint,
} from "./checkpoint.ts";
export { DecoderError, KvDecoder } from "./decoder.ts";
export { logProbOf } from "./ops.ts";
export { decodeSafetensors, encodeSafetensors, type NamedTensor, SafetensorsError } from "./safetensors.ts";
export {
  type CreatePolicyOptions,
  createPolicy,
  DEFAULT_OPTIMIZER,
  ModelInputError,
  type OptimizerOptions,
  type OptimizerState,
  parameterShapes,
  TransformerPolicy,
} from "./transformer.ts";
export type { Decoder, InferencePolicy, TrainablePolicy } from "./types.ts";
