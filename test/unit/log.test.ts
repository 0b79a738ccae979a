import { describe, expect, it } from "vitest";
import { createLogger } from "../../shared/log.ts";

describe("createLogger", () => {
  it("writes JSON lines carrying the correlation keys of the logger and its children", () => {
    const lines: string[] = [];
    const sink = { write: (line: string) => lines.push(line) };
    const log = createLogger({ role: "trainer", experimentId: "exp-1" }, sink);
    log.level = "info";
    log.child({ trajectoryId: "t-9", policyVersion: 4 }).info({ tokens: 12 }, "trained");
    expect(lines).toHaveLength(1);
    const record = JSON.parse(lines[0] as string) as Record<string, unknown>;
    expect(record).toMatchObject({
      role: "trainer",
      experimentId: "exp-1",
      trajectoryId: "t-9",
      policyVersion: 4,
      tokens: 12,
      msg: "trained",
    });
    expect(typeof record.time).toBe("string");
  });
});
