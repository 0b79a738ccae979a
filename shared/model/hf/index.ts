/** Hugging Face transformers folders (Qwen2, Llama) in and out of this project's checkpoint format. */
export { checkpointFolderStore, isHfFolder } from "./base.ts";
export {
  architectureFor,
  HF_ARCHITECTURES,
  type HfArchitecture,
  HfConfigJson,
  HfFormatError,
  hfConfigFor,
  type ImportedHfConfig,
  modelConfigFromHf,
} from "./config.ts";
export {
  type ExportHfOptions,
  exportHfFolder,
  type HfFolder,
  HfMetadata,
  hfCheckpointStore,
  importHfFolder,
  loadHfPolicy,
  modelTokenizerConfig,
  readHfFolder,
  SAFETENSORS_FILE,
  SAFETENSORS_INDEX_FILE,
} from "./folder.ts";
export { hfTensorNames, hfTensorsFromValues, valuesFromHf } from "./weights.ts";
