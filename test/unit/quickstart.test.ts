import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { QUICKSTART_CONFIG } from "../../cli/commands/train.ts";
import { BASE_CHECKPOINT_DIR } from "../../cli/launch/pipeline.ts";
import { TASK_MODULES } from "../../env-images/registry.ts";
import { loadConfig } from "../../shared/config/index.ts";
import { loadCheckpoint } from "../../shared/model/checkpoint.ts";
import { initBackend } from "../../shared/model/index.ts";
import { LocalObjectStore } from "../../shared/transport/local.ts";

const SHIPPED = [
  QUICKSTART_CONFIG,
  ...["learning.yaml", "learning-shop.yaml", "learning-planted-habit.yaml"].map((name) =>
    fileURLToPath(new URL(`../../configs/${name}`, import.meta.url)),
  ),
];

describe("the shipped configs (npm start runs the first)", () => {
  it.each(SHIPPED)("%s is valid, multi-task, with its committed base checkpoint's model", async (file) => {
    const config = await loadConfig(file);
    const tasks = config.tasks.mix.map((t) => t.name).sort();
    if (file === QUICKSTART_CONFIG) expect(tasks).toEqual(["alfworld", "db", "kg", "os", "webshop"]);
    expect(tasks.length).toBeGreaterThanOrEqual(2);
    for (const task of tasks) expect(Object.keys(TASK_MODULES)).toContain(task);
    await initBackend("wasm");
    // policy.base is relative to the working directory, which for a shipped config is the repository root.
    const baseDir = config.policy.base
      ? fileURLToPath(new URL(`../../${config.policy.base}`, import.meta.url))
      : BASE_CHECKPOINT_DIR;
    if (file !== QUICKSTART_CONFIG) expect(baseDir).not.toBe(BASE_CHECKPOINT_DIR);
    const base = await loadCheckpoint(new LocalObjectStore(baseDir), 0);
    try {
      expect(base.manifest.version).toBe(0);
      expect(base.config).toEqual(config.policy.model);
      expect(JSON.parse(base.tokenizerJson)).toHaveProperty("model.type", "BPE");
    } finally {
      base.policy.dispose();
    }
  });
});
