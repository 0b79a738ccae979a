import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { applyOverride, loadConfig, parseConfig } from "../../shared/config/index.ts";
import { expandGrid, parseSweepSpec } from "../../shared/config/sweep.ts";
import { ValidationError } from "../../shared/errors.ts";
import { tempDir } from "../support/tmp.ts";

/** True when any of the probe names leaked onto Object.prototype. */
function polluted(): boolean {
  const probe: Record<string, unknown> = {};
  return ["polluted", "x", "maxSteps"].some((name) => name in probe);
}

afterEach(() => {
  // Undo a pollution so one failing case does not fail every later one.
  for (const name of ["polluted", "x", "maxSteps"]) delete (Object.prototype as Record<string, unknown>)[name];
});

describe("config prototype pollution", () => {
  it.each(["__proto__.polluted=1", "constructor.prototype.polluted=1", "trainer.__proto__.maxSteps=3", "prototype=1"])(
    "--set %s is rejected and Object.prototype stays clean",
    async (assignment) => {
      await expect(loadConfig(undefined, { overrides: [assignment] })).rejects.toThrow(/prototype pollution/);
      expect(() => applyOverride({}, assignment)).toThrow(ValidationError);
      expect(polluted()).toBe(false);
    },
  );

  it("rejects an AGENTRL__ variable that names constructor.prototype", async () => {
    await expect(loadConfig(undefined, { env: { AGENTRL__constructor__prototype__polluted: "1" } })).rejects.toThrow(
      /prototype pollution/,
    );
    expect(polluted()).toBe(false);
  });

  it("rejects __proto__ inside a YAML or JSON config file, naming the path", async () => {
    const dir = tempDir("agentrl-proto-");
    const yaml = join(dir, "c.yaml");
    writeFileSync(yaml, "trainer:\n  __proto__:\n    polluted: 1\n");
    await expect(loadConfig(yaml)).rejects.toThrow(/trainer\.__proto__/);
    expect(() => parseConfig(JSON.parse('{"__proto__": {"polluted": 1}}'))).toThrow(/__proto__/);
    expect(polluted()).toBe(false);
  });

  it("rejects sweep grid paths and bases that name the prototype", () => {
    const viaGrid = () =>
      expandGrid(parseSweepSpec({ name: "p", grid: { "__proto__.polluted": [1], "trainer.maxSteps": [1] } }));
    expect(viaGrid).toThrow(/prototype pollution/);
    const viaConstructor = () =>
      expandGrid(parseSweepSpec({ name: "p", grid: { "constructor.prototype.polluted": [1] } }));
    expect(viaConstructor).toThrow(/prototype pollution/);
    const base = JSON.parse('{"__proto__": {"polluted": 1}}') as Record<string, unknown>;
    expect(() => parseSweepSpec({ name: "p", base, grid: { "trainer.maxSteps": [1] } })).toThrow(/__proto__/);
    expect(polluted()).toBe(false);
  });
});
