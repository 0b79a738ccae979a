import * as tf from "@tensorflow/tfjs";
import { describe, expect, it } from "vitest";
import { backendInfo, createPolicy, initBackend } from "../../shared/model/index.ts";

describe("initBackend", () => {
  it("auto falls back past missing native bindings and keeps its first choice", async () => {
    expect(backendInfo()).toBeUndefined();
    expect(() => createPolicy({ vocabSize: 300, dModel: 16, layers: 1 }, 1)).toThrow(/await initBackend/);
    const info = await initBackend("auto");
    expect(tf.getBackend()).toBe(info.name);
    if (info.name !== "tensorflow") {
      // This machine has no tfjs-node(-gpu): both are reported as skipped, and wasm runs.
      expect(info.skipped.map((s) => s.split(":")[0])).toEqual(["@tensorflow/tfjs-node-gpu", "@tensorflow/tfjs-node"]);
      expect(info.name).toBe("wasm");
    }
    expect(await initBackend("cpu")).toBe(info);
    expect(tf.tidy(() => tf.matMul(tf.ones([2, 3]), tf.ones([3, 2])).dataSync()[0])).toBe(3);
  });
});
