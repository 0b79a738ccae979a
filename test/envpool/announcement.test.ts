import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { announcedAddress } from "../../functions/envpool/processDriver.ts";
import { tempDir } from "../support/tmp.ts";

/** The process driver learns a worker's address from the `listening` line the worker logs. */
describe("announcedAddress (the env worker's log)", () => {
  const dir = tempDir("announcement-");
  const log = (name: string, text: string) => {
    const file = join(dir, name);
    writeFileSync(file, text);
    return file;
  };
  const listening = {
    event: "listening",
    role: "env-worker",
    task: "db",
    url: "http://127.0.0.1:41234",
    address: "http://127.0.0.1:41234/api",
  };

  it("finds the address among the worker's other output", () => {
    const file = log(
      "ok.log",
      `{"level":30,"msg":"starting"}\nnot json at all\n${JSON.stringify(listening)}\n{"level":30,"msg":"registered"}\n`,
    );
    expect(announcedAddress(file)).toBe("http://127.0.0.1:41234/api");
  });

  it("has none yet for a missing log, an empty one, or a line still being written", () => {
    expect(announcedAddress(join(dir, "missing.log"))).toBeUndefined();
    expect(announcedAddress(log("empty.log", ""))).toBeUndefined();
    expect(announcedAddress(log("partial.log", JSON.stringify(listening).slice(0, 60)))).toBeUndefined();
  });

  it("ignores lines that only look like an announcement", () => {
    const file = log(
      "lookalike.log",
      [
        JSON.stringify({ msg: 'the word "listening" in a message' }),
        JSON.stringify({ ...listening, address: undefined }),
        JSON.stringify({ ...listening, address: "not a url" }),
        JSON.stringify({ ...listening, event: "stopped" }),
      ].join("\n"),
    );
    expect(announcedAddress(file)).toBeUndefined();
  });
});
