export * from "./envApi.ts";
export * from "./messages.ts";
export * from "./openai.ts";
