/** The policy model: backend selection, transformer, KV-cache decoder, checkpoints. */
export {
  type BackendInfo,
  type BackendPreference,
  BackendUnavailableError,
  backendInfo,
  initBackend,
} from "./backend.ts";
export {
  CHECKPOINT_FILES,
  CHECKPOINT_SCHEMA_VERSION,
  CheckpointError,
  CheckpointManifest,
  type LoadCheckpointOptions,
  type LoadedCheckpoint,
  listVersions,
  loadCheckpoint,
  newestVersion,
  OPTIMIZER_FILE,
  readManifest,
  type SaveCheckpointOptions,
  saveCheckpoint,
  versionPrefix,
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
