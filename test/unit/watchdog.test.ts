import { describe, expect, it } from "vitest";
import type { TestCase, TestModule } from "vitest/node";
import Watchdog from "../support/watchdog.ts";

// The reporter only reads these fields of vitest's objects.
const moduleOf = (moduleId: string) => ({ moduleId }) as unknown as TestModule;
const testOf = (moduleId: string, fullName: string) => ({ module: { moduleId }, fullName }) as unknown as TestCase;

describe("test-suite watchdog (a reporter)", () => {
  it("names a file only once it has run past the threshold, with the test it is in, then again with the process table", () => {
    const watchdog = new Watchdog();
    const t0 = Date.now();
    watchdog.onTestModuleStart(moduleOf("/repo/test/slow.test.ts"));
    watchdog.onTestModuleStart(moduleOf("/repo/test/quick.test.ts"));
    watchdog.onTestCaseReady(testOf("/repo/test/slow.test.ts", "pipeline > trains"));
    watchdog.onTestModuleEnd(moduleOf("/repo/test/quick.test.ts"));

    expect(watchdog.report(t0 + 299_000)).toEqual([]);

    const first = watchdog.report(t0 + 301_000);
    expect(first).toHaveLength(1);
    expect(first[0]).toMatch(
      /^\[watchdog\] \/repo\/test\/slow\.test\.ts has run 30[01] s, in "pipeline > trains" for 30[01] s$/,
    );
    // Not repeated within the next threshold's span.
    expect(watchdog.report(t0 + 400_000)).toEqual([]);

    const second = watchdog.report(t0 + 602_000);
    expect(second[0]).toMatch(/slow\.test\.ts has run 60[12] s/);
    expect(second.some((line) => /\[watchdog\] +PID +PPID/.test(line))).toBe(true);
    expect(second.some((line) => line.includes(String(process.pid)))).toBe(true);
  });

  it("says nothing of a file that ended, and names one that never reached a test", () => {
    const watchdog = new Watchdog();
    const t0 = Date.now();
    watchdog.onTestModuleStart(moduleOf("/repo/test/done.test.ts"));
    watchdog.onTestModuleEnd(moduleOf("/repo/test/done.test.ts"));
    watchdog.onTestModuleStart(moduleOf("/repo/test/stuck.test.ts"));
    expect(watchdog.report(t0 + 1_000_000)).toEqual([
      "[watchdog] /repo/test/stuck.test.ts has run 1000 s, before its first test",
    ]);
  });
});
