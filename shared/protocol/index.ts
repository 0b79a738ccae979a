export * from "./envApi.ts";
export * from "./messages.ts";
export * from "./metrics.ts";
export * from "./openai.ts";
export * from "./stepRecord.ts";
