import { Command, CommanderError } from "commander";
import { afterEach, describe, expect, it, vi } from "vitest";
import { register } from "../../cli/commands/env.ts";
import { AgentRlError } from "../../shared/errors.ts";

/** Runs `agentrl env ...` in-process and returns what it printed on stdout. */
async function runEnv(args: string[]): Promise<string> {
  const program = new Command("agentrl").exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
  register(program);
  for (const sub of program.commands) {
    sub.exitOverride().configureOutput({ writeErr: () => {} });
    for (const leaf of sub.commands) leaf.exitOverride().configureOutput({ writeErr: () => {} });
  }
  let out = "";
  const spy = vi.spyOn(process.stdout, "write").mockImplementation((chunk: string | Uint8Array) => {
    out += String(chunk);
    return true;
  });
  try {
    await program.parseAsync(["node", "agentrl", "env", ...args]);
  } finally {
    spy.mockRestore();
  }
  return out;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("agentrl env check", () => {
  it("prints the expert's and the random agent's success rate, reward and turns", async () => {
    const out = await runEnv(["check", "example", "--split", "test", "--n", "6"]);
    const lines = out.trim().split("\n");
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(
      /^example test\[1000\.\.1006\) example-expert: success 100\.0% \(6\/6\), avg reward 1\.000, avg turns 3\.00/,
    );
    expect(lines[1]).toMatch(/example-random: success \d+\.\d% \(\d\/6\), avg reward 0\.\d{3}, avg turns 1\.00/);
  });

  it("rejects an unknown task and bad options with one line naming what is allowed", async () => {
    const unknown = await runEnv(["check", "nosuch"]).catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(AgentRlError);
    expect((unknown as Error).message).toMatch(/^unknown task "nosuch"; available: .*example/);
    expect((unknown as Error).message).not.toContain("\n");

    const badN = await runEnv(["check", "example", "--n", "zero"]).catch((e: unknown) => e);
    expect(badN).toBeInstanceOf(CommanderError);
    expect((badN as Error).message).toMatch(/--n must be an integer >= 1, got "zero"/);

    const badSplit = await runEnv(["check", "example", "--split", "valid"]).catch((e: unknown) => e);
    expect((badSplit as Error).message).toMatch(/--split must be train or test/);

    const noController = await runEnv(["serve", "example"]).catch((e: unknown) => e);
    expect(noController).toBeInstanceOf(CommanderError);
    expect((noController as Error).message).toMatch(/--controller/);

    const badUrl = await runEnv(["serve", "example", "--controller", "localhost"]).catch((e: unknown) => e);
    expect((badUrl as Error).message).toMatch(/--controller must be an http\(s\) URL/);
  });
});
